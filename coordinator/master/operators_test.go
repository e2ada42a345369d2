package master_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func (h *harness) operators() []master.Operator {
	h.t.Helper()
	ops, bad, err := master.ListOperators(context.Background(), h.store, h.keys)
	require.NoError(h.t, err)
	require.Empty(h.t, bad)
	return ops
}

// what an operator decides, without when it was made or how far it got.
func decided(ops []master.Operator) []master.Operator {
	out := make([]master.Operator, 0, len(ops))
	for _, o := range ops {
		o.Created, o.Step = time.Time{}, ""
		out = append(out, o)
	}
	return out
}

func assignmentNeverBelow(t *testing.T, c *collector, rf int) {
	t.Helper()
	for _, kv := range c.all(t) {
		var a models.Assignment
		require.NoError(t, json.Unmarshal(kv.Value, &a))
		for _, sh := range a.Shards {
			require.GreaterOrEqual(t, len(sh.Replicas), rf, "%s/%d at revision %d: %v", a.DB, sh.ID, kv.ModRev, sh.Replicas)
		}
	}
}

// The dry run shows exactly the operators a rebalance then persists and
// runs, and the master carries them to their targets.
func TestRebalanceDryRunIsWhatRuns(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	rm := h.startMaster(masterOpts{}) // rebalance delay: an hour
	assigns := h.collect(h.keys.AssignPrefix())
	h.createDB("r", 12, 2)
	h.register("n4", nil)
	h.eventually("n4 live", func(st *statemachine.State) bool { return st.Nodes.At(cluster).Len() == 4 })

	v, err := rm.Rebalance(context.Background(), true)
	require.NoError(t, err)
	dry := v
	require.True(t, dry.DryRun)
	require.NotEmpty(t, dry.Operators)
	require.Equal(t, dry.LowerBound, dry.Relocations)
	require.Empty(t, h.operators(), "a dry run persisted operators")

	records := h.collect(h.keys.NS + "/operators/")
	v, err = rm.Rebalance(context.Background(), false)
	require.NoError(t, err)
	run := v
	require.False(t, run.DryRun)
	require.Equal(t, decided(dry.Operators), decided(run.Operators), "the run differs from its dry run")
	require.Equal(t, dry.Moves, run.Moves)
	// Persisted (before any step ran): the first version of each record is
	// the operator the answer showed.
	first := map[string]master.Operator{}
	require.Eventually(t, func() bool {
		records.mu.Lock()
		defer records.mu.Unlock()
		for _, kv := range records.kvs {
			if _, seen := first[kv.Key]; !seen {
				var o master.Operator
				require.NoError(t, json.Unmarshal(kv.Value, &o))
				first[kv.Key] = o
			}
		}
		return len(first) >= len(run.Operators)
	}, waitFor, pollTick, "operators not persisted")
	var persisted []master.Operator
	for _, o := range first {
		persisted = append(persisted, o)
	}
	slices.SortFunc(persisted, func(a, b master.Operator) int { return a.Shard - b.Shard })
	var shown []master.Operator // as the API sends them
	require.NoError(t, json.Unmarshal(mustJSON(t, run.Operators), &shown))
	require.Equal(t, shown, persisted)

	h.eventually("operators done", func(st *statemachine.State) bool {
		for _, o := range run.Operators {
			if o.Kind == master.OpMove && !sameSet(st.Assignments.At("r").Shards[o.Shard].Replicas, o.To) {
				return false
			}
		}
		return allOnline(st, "r", 12)
	})
	require.Eventually(t, func() bool { return len(h.operators()) == 0 }, waitFor, pollTick, "operators never deleted")
	replicas, _ := counts(h.sm.Snapshot(), []string{"n1", "n2", "n3", "n4"})
	require.Equal(t, map[string]int{"n1": 6, "n2": 6, "n3": 6, "n4": 6}, replicas)
	assignmentNeverBelow(t, assigns, 2)
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && len(minus(a, b)) == 0
}

// A new term resumes the operators an earlier one persisted (here one the
// planner would not choose now: nothing else would move it), and drops
// records it cannot decode.
func TestOperatorsResumedByTheNextTerm(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	rm := h.startMaster(masterOpts{})
	h.createDB("res", 6, 2)
	rm.stop()
	require.NoError(t, h.store.Revoke(context.Background(), rm.election.Lease()))

	sh := h.sm.Snapshot().Assignments.At("res").Shards[0]
	other := minus([]string{"n1", "n2", "n3"}, sh.Replicas)[0]
	op := master.Operator{DB: "res", Shard: 0, Kind: master.OpMove, From: sh.Replicas, To: []string{sh.Replicas[1], other},
		Leader: other, Step: master.StepWaitSync, MasterTerm: rm.term, Created: time.Now()}
	ctx := context.Background()
	_, err := h.store.Put(ctx, h.keys.NS+"/operators/res/0", mustJSON(t, op), 0)
	require.NoError(t, err)
	_, err = h.store.Put(ctx, h.keys.NS+"/operators/res/1", []byte("{not json"), 0)
	require.NoError(t, err)
	ops, bad, err := master.ListOperators(ctx, h.store, h.keys)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Len(t, bad, 1)

	assigns := h.collect(h.keys.AssignPrefix())
	h.startMaster(masterOpts{})
	h.eventually("the persisted move carried out", func(st *statemachine.State) bool {
		s, _ := st.ShardState("res", 0)
		return sameSet(st.Assignments.At("res").Shards[0].Replicas, op.To) && s.Leader == other && s.Status == models.StatusOnline
	})
	require.Eventually(t, func() bool {
		kvs, _, err := h.store.List(ctx, h.keys.NS+"/operators/")
		return err == nil && len(kvs) == 0
	}, waitFor, pollTick, "operator records left behind")
	assignmentNeverBelow(t, assigns, 2)
}

// At most MaxMovesInFlight (16) shards change replicas at once: with new
// replicas that never catch up, exactly 16 shards hold an extra replica and
// the rest wait.
func TestMovesInFlightAreCapped(t *testing.T) {
	h := newHarness(t, "n1")
	rm := h.startMaster(masterOpts{})
	h.createDB("cap", 40, 1)
	for i := range 40 {
		h.writeISR("cap", i, models.ISR{Leader: "n1", Term: 1, Replicas: []string{"n1"}})
	}
	h.register("n2", nil)
	h.eventually("n2 live and the sets seen", func(st *statemachine.State) bool {
		return st.Nodes.At(cluster).Len() == 2 && st.ISR.At(cluster).Len() == 40
	})
	v, err := rm.Rebalance(context.Background(), false)
	require.NoError(t, err)
	require.Len(t, v.Operators, 20)
	grown := func(st *statemachine.State) int {
		n := 0
		for _, sh := range st.Assignments.At("cap").Shards {
			if len(sh.Replicas) > 1 {
				n++
			}
		}
		return n
	}
	h.eventually("16 moves started", func(st *statemachine.State) bool { return grown(st) == 16 })
	h.settle(rm)
	h.settle(rm)
	require.Equal(t, 16, grown(h.sm.Snapshot()), "more than 16 moves in flight")
	steps := map[master.Step]int{}
	for _, o := range h.operators() {
		steps[o.Step]++
	}
	require.Equal(t, map[master.Step]int{master.StepWaitSync: 16, master.StepAdd: 4}, steps)
	// In-sync sets catch up: the 16 finish, then the other 4 start.
	catchUp := func() {
		for i, sh := range h.sm.Snapshot().Assignments.At("cap").Shards {
			h.writeISR("cap", i, models.ISR{Leader: "n1", Term: 1, Replicas: slices.Clone(sh.Replicas)})
		}
	}
	catchUp()
	h.eventually("the other 4 started", func(st *statemachine.State) bool {
		replicas, _ := counts(st, []string{"n1", "n2"})
		return grown(st) == 4 && replicas["n2"] == 20
	})
	catchUp()
	h.eventually("balanced", func(st *statemachine.State) bool {
		replicas, _ := counts(st, []string{"n1", "n2"})
		return replicas["n1"] == 20 && replicas["n2"] == 20
	})
}
