package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFollowerOfALeaderNotLiveWaits: a follower whose leader's record is
// gone from the live nodes it watches (the leader's lease ended) looks the
// leader up once and then waits, for its role to change or a node to become
// live, instead of looking again on a back-off from 50 ms (what thousands
// of followers of a dead domain's leaders did while the master re-elected
// them). When the leader is live again it follows it again at once, well
// before the wait's own recheck.
func TestFollowerOfALeaderNotLiveWaits(t *testing.T) {
	store, sm := memState(t)
	nodes := statemachine.ClusterNodesSource("default")
	sm.Push(statemachine.Event{Source: nodes, Type: kv.WatchSynced})

	leader := startNode(t, "L", sm, store)
	core, logs := observer.New(zapcore.DebugLevel)
	feng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	cfg := hostConfig("F", "", sm, store, feng)
	cfg.Logger = zap.New(core)
	follower, _ := runHost(t, cfg)
	addrs := map[string]string{"L": leader.addr(), "F": follower.addr()}
	oneShard(sm, addrs, []string{"L", "F"}, "L", 1)
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	// A write F acknowledges: F has fetched in L's leadership, and so leaves
	// the set once it stops (a follower that never fetched from an empty
	// shard's leader stays in its set).
	require.Eventually(t, func() bool { return leader.host.Write(context.Background(), "d", 0, 1, points(0, 1)) == nil },
		10*time.Second, 10*time.Millisecond)

	// L's record goes (its lease ended); L itself keeps serving, as a node
	// cut off from etcd would.
	lookups := func() int { return logs.FilterMessage("leader address unknown").Len() }
	sm.Push(statemachine.Event{Source: nodes, Kind: statemachine.KindStorageNodes, Cluster: "default", Type: kv.WatchDelete, Name: "L"})
	require.Eventually(t, func() bool { return lookups() >= 1 }, 10*time.Second, time.Millisecond)
	waiting := time.Now()
	// On the old back-off (50, 100, 200, 400, 800 ms) this would be 5 more.
	require.Never(t, func() bool { return lookups() > 1 }, 1500*time.Millisecond, 10*time.Millisecond,
		"the follower waits instead of looking the leader up again")

	// L is live again: F follows it at once (it left the in-sync set after
	// the lag bound, and is back in it well before the wait's recheck).
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 1 }, 10*time.Second, 10*time.Millisecond)
	put(sm, nodes, statemachine.KindStorageNodes, "default", "L", models.StorageNode{NodeID: "L", NodeAddress: leader.addr()})
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Less(t, time.Since(waiting), 4*time.Second, "woken by L's return, not by the recheck 5 s after it began to wait")
}
