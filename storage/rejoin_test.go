package storage_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// startOverDir runs a node over the engine files in dir (runNode's stop).
func startOverDir(t *testing.T, id, dir string, sm *statemachine.Manager, store kv.Store) (*node, func()) {
	eng, err := engine.NewBoltEngine(dir)
	require.NoError(t, err)
	return runNode(t, id, "", sm, store, eng)
}

// TestRestartedFollowerRejoinsHoldingAcknowledgedWrites: issue 8, nemesis
// seed 1. A follower stopped right after a fetch and restarted later fetches
// from where the leader was at that fetch, which the lag rule counts as
// caught up; it was put back in the in-sync set while hundreds of
// acknowledged entries behind, and the master, which moves a leadership to
// a member of the set, handed it the shard: the others truncated the
// acknowledged tail (247 batches). Whenever the in-sync set on record names
// the restarted follower, its log must hold every acknowledged write.
func TestRestartedFollowerRejoinsHoldingAcknowledgedWrites(t *testing.T) {
	store, sm := memState(t)
	ctx := context.Background()

	leader := startNode(t, "L", sm, store)
	follower := startNode(t, "F", sm, store)
	gDir := t.TempDir()
	g, stopG := startOverDir(t, "G", gDir, sm, store)
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for _, n := range []*node{leader, follower, g} {
		live(t, store, "/t/storage/default", n.id, n.addr())
	}
	publishShard(sm, []string{"L", "F", "G"}, "L", 1)
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 3 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(0, 5)))

	// G stops (its record stays, as after kill -9): it leaves the set by
	// not fetching, and L and F acknowledge many writes without it.
	stopG()
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 20*time.Millisecond)
	// Big entries: G needs many fetches, and a while, to catch up.
	const writers, each, size = 8, 150, 400
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- leader.host.Write(ctx, "d", 0, 1, points(10+(w*each+i)*size, size))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	acked := ls.LastTxnID() // every entry was acknowledged
	require.EqualValues(t, 1+writers*each, acked)

	// G comes back over its files and catches up 64 entries a fetch.
	g2, _ := startOverDir(t, "G", gDir, sm, store)
	live(t, store, "/t/storage/default", "G", g2.addr())
	gs, err := g2.eng.Open("d", 0)
	require.NoError(t, err)
	// The set first, the log after: the log only grows, so a log short of
	// the acknowledged writes now was short when the set named G.
	var shortInSet atomic.Uint64 // G's log length seen while the set named it short (0: never)
	require.Eventually(t, func() bool {
		in := slices.Contains(isrOf(t, store, 0), "G")
		if has := gs.LastTxnID(); in && has < acked {
			shortInSet.Store(has + 1)
		}
		return in
	}, 20*time.Second, time.Millisecond, "G never rejoined the in-sync set")
	require.Zero(t, shortInSet.Load(), "G was in the in-sync set holding %d of %d acknowledged writes", max(shortInSet.Load(), 1)-1, acked)
	require.GreaterOrEqual(t, gs.LastTxnID(), acked)
	// A write after the rejoin is acknowledged with G in the set.
	require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(10+writers*each*size, 5)))
}
