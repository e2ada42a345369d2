package storage

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// nextUpkeep runs r's upkeep now and returns how long until the next one.
// The kick itself moves the due time to now, before the upkeep has run:
// the next one is the one scheduled after the kick, by a run that has
// ended.
func nextUpkeep(t *testing.T, r *replica) time.Duration {
	t.Helper()
	r.mu.Lock()
	rr := r.run
	r.mu.Unlock()
	require.NotNil(t, rr, "r has a role")
	rr.kick()
	kicked := time.Now()
	var due time.Time
	require.Eventually(t, func() bool {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		due = rr.upkeepDue
		return due.After(kicked) && !rr.busy
	}, 10*time.Second, time.Millisecond, "the kicked upkeep ran and scheduled the next")
	return time.Until(due)
}

// A leader whose in-sync set lacks only replicas that are not live looks
// at it again at the quiet pace: nothing can change until such a replica
// is back and fetching, and its parked fetches wake the upkeep. Before, it
// looked four times per lag bound for as long as the replica was down: at
// 300 simulated nodes a dead failure domain kept 32,000 leaderships doing
// so, and the new leaders' first sets waited behind their upkeeps. L leads
// shard 0 with replicas {L, D}, D not live: its set {L} is quiet. D back
// live: the upkeep comes at a quarter of the lag bound again, to add it
// once caught up.
func TestUpkeepOfASetLackingOnlyADeadReplicaIsQuiet(t *testing.T) {
	b := startBatchHost(t, 1)
	b.assign("L", "D")
	b.lead(1)
	require.Eventually(t, func() bool { s := b.set(0); return s.Term == 1 && s.Leader == "L" },
		10*time.Second, 10*time.Millisecond, "L's first set written")
	require.Equal(t, []string{"L"}, b.set(0).Replicas, "D, not live, is not in it")
	r := b.h.get("d", 0)
	require.NotNil(t, r)
	lag := b.h.cfg.LagBound
	require.Greater(t, nextUpkeep(t, r), lag, "a set lacking only a dead replica is quiet")

	b.push(statemachine.ClusterNodesSource("default"), statemachine.KindStorageNodes, "D",
		models.StorageNode{NodeID: "D", NodeAddress: "127.0.0.1:1"})
	require.Eventually(t, func() bool { return b.h.peerCanSync("D") }, 10*time.Second, time.Millisecond, "D live in L's view")
	require.LessOrEqual(t, nextUpkeep(t, r), lag/4, "D live again: the upkeep comes soon, to add it once caught up")
}

// A leader whose in-sync set write fails backs its upkeep off: an etcd
// timing writes out is not asked again at the upkeep's pace by every
// leadership at once (a dead domain's followers are dropped by ~14,000
// leaderships at 1,000 simulated nodes; retried every quarter lag bound
// they kept etcd timing out until the live nodes' leases ran out). F, a
// member of L's set, dies while the set's writes fail: after three failed
// drops the next upkeep is further off than a set that is not quiet waits;
// once writes go through, F is dropped.
func TestUpkeepBacksOffAfterFailedISRWrites(t *testing.T) {
	b := startBatchHost(t, 1)
	r := b.leaderships(1)[0]
	lag := b.h.cfg.LagBound
	b.store.failISR.Store(true)
	b.sm.Push(statemachine.Event{Source: statemachine.ClusterNodesSource("default"), Kind: statemachine.KindStorageNodes,
		Cluster: "default", Type: kv.WatchDelete, Name: "F"})
	require.Eventually(t, func() bool { return !b.h.peerCanSync("F") }, 10*time.Second, time.Millisecond, "F dead in L's view")
	var next time.Duration
	for range 3 {
		next = nextUpkeep(t, r)
	}
	require.Greater(t, next, lag/2, "three failed drops: backed off")
	require.Len(t, b.set(0).Replicas, 2, "F not dropped yet")
	b.store.failISR.Store(false)
	nextUpkeep(t, r)
	require.Equal(t, []string{"L"}, b.set(0).Replicas, "F dropped once writes go through")
}

// A new database's follower that has not fetched yet stays in its leader's
// first set past the lag bound: the shard is empty, so it lacks nothing, and
// dropping it cost two set writes (the drop, and the add once it came) per
// shard whose followers took up their roles late, thousands while 1,000
// simulated nodes were placed. A follower that did fetch and then stopped
// still leaves. L leads {L, F}; F's fetch bookkeeping is aged past the
// bound (an hour here).
func TestNewShardsFollowerNotFetchedYetStaysInTheFirstSet(t *testing.T) {
	b := startBatchHost(t, 1)
	r := b.leaderships(1)[0]
	age := func(fetchedOnce bool) {
		past := time.Now().Add(-2 * b.h.cfg.LagBound)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ls.fetched["F"], r.ls.caught["F"] = past, past
		if fetchedOnce {
			r.ls.sentEnd["F"] = 0
		}
	}
	age(false)
	nextUpkeep(t, r)
	require.ElementsMatch(t, []string{"L", "F"}, b.set(0).Replicas, "F, not fetched yet from an empty shard, stays")
	r.mu.Lock()
	require.ElementsMatch(t, []string{"L", "F"}, r.ls.isr)
	r.mu.Unlock()

	age(true)
	nextUpkeep(t, r)
	require.Equal(t, []string{"L"}, b.set(0).Replicas, "F fetched once and stopped: it leaves")
}
