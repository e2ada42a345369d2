package master_test

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A node that dies and comes back leads nothing after the failover; once
// membership has been stable for the rebalance delay (on the master's clock)
// its share of every database's leaders is handed back to it.
func TestLeadersComeBackAfterRebalanceDelay(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	clock := &skewClock{}
	rm := h.startMaster(masterOpts{rebalanceDelay: time.Hour, now: clock.Now})
	h.createDB("x", 6, 3)
	h.createDB("y", 4, 3)
	// The master's first plan of the term, at a stable membership.
	clock.Advance(2 * time.Hour)
	h.settle(rm)

	victim := h.etcdStates("x").Shards[0].Leader
	h.kill(victim)
	h.eventually("failed over", func(st *statemachine.State) bool {
		_, leaders := counts(st, nodes)
		return leaders[victim] == 0 && allOnline(st, "x", 6) && allOnline(st, "y", 4)
	})
	// Back before the delay: the membership is the one last balanced.
	h.register(victim, nil)
	h.eventually("victim live", func(st *statemachine.State) bool { _, ok := st.Nodes[cluster][victim]; return ok })
	clock.Advance(30 * time.Minute)
	h.settle(rm)
	_, leaders := counts(h.sm.Snapshot(), nodes)
	require.Zero(t, leaders[victim], "leaders moved before membership was stable for the delay")

	clock.Advance(31 * time.Minute)
	h.eventually("every database's leaders spread max - min <= 1", func(st *statemachine.State) bool {
		for db, n := range map[string]int{"x": 6, "y": 4} {
			if !allOnline(st, db, n) {
				return false
			}
			per := map[string]int{"n1": 0, "n2": 0, "n3": 0}
			for _, s := range st.ShardStates[db].Shards {
				per[s.Leader]++
			}
			if spread(per, nodes) > 1 {
				return false
			}
		}
		return true
	})
	// Spread, it stays put.
	before := h.etcdStates("x")
	h.settle(rm)
	require.Equal(t, before, h.etcdStates("x"))
}
