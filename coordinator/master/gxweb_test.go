package master_test

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The example of issue 24: on one node, databases g and x (4 shards, one
// replica each); a second node joins and web (4 shards, two replicas) is
// created; the rebalance that runs once the membership has been stable for
// the delay splits g and x 2/2, not only the nodes' totals (the old default
// moved all 4 shards of g to the new node, so losing it took g offline).
// Leaders too are spread per database and in total.
func TestRebalanceSpreadsEachDatabase(t *testing.T) {
	h := newHarness(t, "n1")
	clock := &skewClock{}
	rm := h.startMaster(masterOpts{now: clock.Now})
	h.createDB("g", 4, 1)
	h.createDB("x", 4, 1)
	h.register("n2", nil)
	h.eventually("n2 live", func(st *statemachine.State) bool { return st.Nodes.At(cluster).Len() == 2 })
	h.createDB("web", 4, 2)
	h.settle(rm) // the pass that dates the membership change
	st := h.sm.Snapshot()
	replicas, _ := perDB(st, "g")
	require.Equal(t, 4, replicas["n1"], "moved before the rebalance delay")

	clock.Advance(2 * time.Hour)
	nodes := []string{"n1", "n2"}
	h.eventually("g, x and web each spread over both nodes", func(st *statemachine.State) bool {
		for _, db := range []string{"g", "x", "web"} {
			replicas, leaders := perDB(st, db)
			if !allOnline(st, db, 4) || spread(replicas, nodes) != 0 || spread(leaders, nodes) > 0 {
				return false
			}
		}
		return true
	})
	require.Eventually(t, func() bool { return len(h.operators()) == 0 }, waitFor, pollTick, "operators never finished")
	st = h.sm.Snapshot()
	for _, db := range []string{"g", "x"} {
		replicas, leaders := perDB(st, db)
		require.Equal(t, map[string]int{"n1": 2, "n2": 2}, replicas, db)
		require.Equal(t, map[string]int{"n1": 2, "n2": 2}, leaders, db)
	}
	replicas, leaders := counts(st, nodes)
	require.Equal(t, map[string]int{"n1": 8, "n2": 8}, replicas)
	require.Equal(t, map[string]int{"n1": 6, "n2": 6}, leaders)
	// Spread, it stays put.
	before := h.etcdStates("g")
	h.settle(rm)
	require.Equal(t, before, h.etcdStates("g"))
}

// perDB is counts for one database.
func perDB(st *statemachine.State, db string) (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for _, sh := range st.Assignments.At(db).Shards {
		for _, r := range sh.Replicas {
			replicas[r]++
		}
	}
	for _, s := range st.ShardStates.At(db).Shards {
		leaders[s.Leader]++
	}
	return replicas, leaders
}
