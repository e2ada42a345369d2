package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A follower's batched fetch is re-sent whenever a shard joins its session:
// the parked one is cancelled. A poll parked longer than the lag bound and
// then cancelled that way is a follower fetching until that instant, not one
// that stopped: it stays in every in-sync set. (It used to be dropped at once
// and added back by its next poll: two in-sync writes per shard of the
// session at every join, 3,000 of them while placing 1,000 nodes' shards.)
func TestJoiningShardKeepsParkedFollowerInSync(t *testing.T) {
	store, sm := memState(t)
	leader := startNode(t, "L", sm, store)   // lag bound 500ms
	follower := startNode(t, "F", sm, store) // parks its polls up to 2s
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", leader.addr())
	live(t, store, "/t/storage/default", "F", follower.addr())
	ctx := context.Background()
	isrRev := func(db string) int64 {
		kvp, err := store.Get(ctx, "/t/storage/default/isr/"+db+"/0")
		require.NoError(t, err)
		if kvp == nil {
			return 0
		}
		return kvp.ModRev
	}
	// addDB publishes a one-shard database led by L and followed by F, and
	// returns once a write to it is acknowledged (F holds it: F's session
	// polls the shard).
	addDB := func(db string) {
		publishDB(sm, db, "u-"+db, []string{"L", "F"}, "L", 1)
		require.Eventually(t, func() bool { return leader.host.Write(ctx, db, 0, 1, points(0, 10)) == nil },
			10*time.Second, 10*time.Millisecond, "write to %s acknowledged", db)
	}
	addDB("d1")
	addDB("d2")
	revs := map[string]int64{"d1": isrRev("d1"), "d2": isrRev("d2")}
	require.Positive(t, revs["d1"])
	require.Positive(t, revs["d2"])
	// F's poll, re-sent once d2's write was applied, is parked now; let it
	// stay parked past the lag bound, then make a shard join the session.
	parkedSince := time.Now()
	require.Eventually(t, func() bool { return time.Since(parkedSince) > 1200*time.Millisecond }, 5*time.Second, 50*time.Millisecond)
	addDB("d3")
	// The cancelled poll's end wakes the leader's upkeep at once; give it a
	// lag bound more to act.
	settled := time.Now()
	require.Eventually(t, func() bool { return time.Since(settled) > time.Second }, 5*time.Second, 50*time.Millisecond)
	for db, rev := range revs {
		require.Equal(t, rev, isrRev(db), "the in-sync set of %s was rewritten: F was dropped (and added back)", db)
	}
}
