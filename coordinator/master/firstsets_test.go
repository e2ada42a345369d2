package master_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestFirstSetsWrittenWithPlacement: with FirstSets the master records a new
// database's first in-sync sets in the placement's txn (every replica, led
// by the shard's leader, term 1, this etcd cluster), so leaders write none;
// a set left at a key by an earlier database is never overwritten (that
// database is placed without sets).
func TestFirstSetsWrittenWithPlacement(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3", "n4")
	ctx := context.Background()
	cid, err := h.store.ClusterID(ctx)
	require.NoError(t, err)
	leftover := models.ISR{Leader: "n4", Term: 7, Replicas: []string{"n4"}}
	h.writeISR("old", 1, leftover)
	h.startMaster(masterOpts{firstSets: true})
	h.createDB("fresh", 6, 3)
	h.createDB("old", 3, 2)

	st := h.sm.Snapshot()
	a, ss := st.Assignments.At("fresh"), st.ShardStates.At("fresh")
	for i, sh := range a.Shards {
		kvp, err := h.store.Get(ctx, h.ck.ISR("fresh", sh.ID))
		require.NoError(t, err)
		require.NotNil(t, kvp, "shard %d has no first set", sh.ID)
		var set models.ISR
		require.NoError(t, json.Unmarshal(kvp.Value, &set))
		s := ss.Shards[i]
		require.Equal(t, s.Leader, set.Leader)
		require.Equal(t, s.Leader, set.Replicas[0], "the leader first, as a leader lists its set")
		require.EqualValues(t, 1, set.Term)
		require.Equal(t, cid, set.ClusterID)
		require.ElementsMatch(t, sh.Replicas, set.Replicas)
		// Written with the assignment, in one txn.
		ak, err := h.store.Get(ctx, h.keys.Assign("fresh"))
		require.NoError(t, err)
		require.Equal(t, ak.ModRev, kvp.ModRev)
	}
	// The leftover set is untouched, and the other shards of that database
	// got none: it was placed without them.
	for i := range 3 {
		kvp, err := h.store.Get(ctx, h.ck.ISR("old", i))
		require.NoError(t, err)
		if i != 1 {
			require.Nil(t, kvp)
			continue
		}
		var set models.ISR
		require.NoError(t, json.Unmarshal(kvp.Value, &set))
		require.Equal(t, leftover, set)
	}
	require.True(t, slices.ContainsFunc(st.Assignments.At("old").Shards, func(sh models.ShardAssignment) bool { return len(sh.Replicas) == 2 }))

	// The states say which etcd cluster the sets were made in (leaders take
	// them from their watch unread), those of the database placed without
	// sets say none, and states published later (a failover) vouch for none.
	require.Equal(t, cid, h.etcdStates("fresh").FirstSets)
	require.Zero(t, h.etcdStates("old").FirstSets)
	lost := ss.Shards[0].Leader
	h.kill(lost)
	h.eventually("a shard of fresh failed over", func(st *statemachine.State) bool {
		return slices.ContainsFunc(st.ShardStates.At("fresh").Shards, func(s models.ShardState) bool { return s.Term > 1 })
	})
	require.Zero(t, h.etcdStates("fresh").FirstSets)
}
