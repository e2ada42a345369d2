package storage_test

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// TestParkedFollowerRejoinsAfterALeaseBlip: a follower whose lease ran out
// for a moment (a loaded etcd or process) leaves the in-sync set at once,
// and must come back as soon as it is live again while its idle poll stays
// parked at the leader: a parked poll means it holds everything the leader
// has. It came back only when that poll ended (up to 30 s on an idle
// shard), and only if the leader's upkeep then ran within half the lag
// bound; under load it missed that and waited for the next poll. Meanwhile
// the set was the leader alone, and a leader dying then took its shard
// offline for good (1,000 simulated nodes: 14 of the 45 shards a killed
// node led were never led again) although every live replica held every
// acknowledged write.
func TestParkedFollowerRejoinsAfterALeaseBlip(t *testing.T) {
	store, sm := memState(t)
	nodes := statemachine.ClusterNodesSource("default")
	sm.Push(statemachine.Event{Source: nodes, Type: kv.WatchSynced})

	start := func(id string) *node {
		eng, err := engine.NewBoltEngine(t.TempDir())
		require.NoError(t, err)
		cfg := hostConfig(id, "", sm, store, eng)
		cfg.FetchWait = 20 * time.Second // an idle poll parks longer than the test waits
		n, _ := runHost(t, cfg)
		return n
	}
	leader, follower := start("L"), start("F")
	oneShard(sm, map[string]string{"L": leader.addr(), "F": follower.addr()}, []string{"L", "F"}, "L", 1)
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	// F's poll parks at L: nothing is written.
	require.Eventually(t, func() bool {
		return leader.host.ParkedFetches() > 0
	}, 10*time.Second, 10*time.Millisecond)

	sm.Push(statemachine.Event{Source: nodes, Kind: statemachine.KindStorageNodes, Cluster: "default", Type: kv.WatchDelete, Name: "F"})
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 1 }, 10*time.Second, 10*time.Millisecond,
		"a follower whose lease is gone leaves the in-sync set")
	put(sm, nodes, statemachine.KindStorageNodes, "default", "F", models.StorageNode{NodeID: "F", NodeAddress: follower.addr()})
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 3*time.Second, 10*time.Millisecond,
		"live again and parked at the leader with everything it has: back in the set before its poll ends")
}
