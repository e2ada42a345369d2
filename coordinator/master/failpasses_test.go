package master_test

import (
	"testing"

	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestFailoverPassesDecideOnTheirOwnStates: a new leader that dies right
// after its failover's publication is failed over again by the next pass,
// which decides on the states the first published (a view of the first
// pass's inputs would see the shards as led by the first dead node's
// successors, or not at all): each shard's term grows by one per dead
// leader, and every shard ends led by a live replica.
func TestFailoverPassesDecideOnTheirOwnStates(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{})
	h.createDB("two", 8, 3)
	before := h.etcdStates("two")

	first := before.Shards[0].Leader
	h.kill(first)
	h.eventually("first failover published", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("two"), first) && allOnline(st, "two", 8)
	})
	mid := h.etcdStates("two")
	second := mid.Shards[0].Leader
	require.NotEqual(t, first, second)
	h.kill(second)
	h.eventually("second failover published", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("two"), second) && allOnline(st, "two", 8)
	})

	after := h.etcdStates("two")
	for _, s := range after.Shards {
		want := before.Shards[s.ID].Term
		if before.Shards[s.ID].Leader == first {
			want++
		}
		if mid.Shards[s.ID].Leader == second {
			want++
		}
		require.Equal(t, want, s.Term, "shard %d", s.ID)
		require.NotContains(t, []string{first, second}, s.Leader, "shard %d", s.ID)
		require.Contains(t, h.sm.Snapshot().Assignments.At("two").Shards[s.ID].Replicas, s.Leader, "shard %d", s.ID)
	}
}
