package master_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// spreadCase builds one database: shard i has replicas reps[i] and leader
// leaders[i] (online, term 1); every node in live is live.
func spreadCase(reps [][]string, leaders []string, live ...string) master.ShardInputs {
	in := master.ShardInputs{DB: "db", Assign: models.Assignment{DB: "db", Cluster: cluster},
		States: models.ShardStates{DB: "db"}, Live: statemachine.MapOf(map[string]models.StorageNode{})}
	for i, r := range reps {
		in.Assign.Shards = append(in.Assign.Shards, models.ShardAssignment{ID: i, Replicas: r})
		in.States.Shards = append(in.States.Shards, models.ShardState{ID: i, Leader: leaders[i], Term: 1, Status: models.StatusOnline})
	}
	for _, n := range live {
		in.Live = in.Live.Set(n, models.StorageNode{NodeID: n})
	}
	return in
}

func leaderCounts(ss models.ShardStates, nodes ...string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n] = 0
	}
	for _, s := range ss.Shards {
		if s.Status == models.StatusOnline {
			out[s.Leader]++
		}
	}
	return out
}

func spreadOf(c map[string]int) int {
	vals := slices.Collect(maps.Values(c))
	return slices.Max(vals) - slices.Min(vals)
}

func TestSpreadLeaders(t *testing.T) {
	abc := []string{"a", "b", "c"}
	t0 := time.Unix(1_000_000, 0)
	delay := 30 * time.Second
	eight := func(r []string) [][]string {
		out := make([][]string, 8)
		for i := range out {
			out[i] = r
		}
		return out
	}
	allOn := func(n string, k int) []string { return slices.Repeat([]string{n}, k) }
	tests := []struct {
		name    string
		in      master.ShardInputs
		now     time.Time
		moves   int // transfers expected; -1: not checked
		spread  int // max - min leaders per node after
		counts  map[string]int
		maxMove int
	}{
		{name: "membership changed 29s ago: nothing moves yet",
			in: spreadCase(eight(abc), allOn("a", 8), abc...), now: t0.Add(delay - time.Second), moves: 0, spread: 8},
		{name: "stable for the delay: 8 leaders on one node spread 3/3/2 with 5 transfers",
			in: spreadCase(eight(abc), allOn("a", 8), abc...), now: t0.Add(delay), moves: 5, spread: 1},
		{name: "already balanced: nothing moves",
			in:  spreadCase(eight(abc), []string{"a", "b", "c", "a", "b", "c", "a", "b"}, abc...),
			now: t0.Add(time.Hour), moves: 0, spread: 1},
		{name: "returned node leads nothing: it takes its share",
			in:  spreadCase(eight(abc), []string{"a", "b", "a", "b", "a", "b", "a", "b"}, abc...),
			now: t0.Add(time.Hour), moves: 2, spread: 1, counts: map[string]int{"a": 3, "b": 3, "c": 2}},
		{name: "node out of the in-sync sets is not given leadership",
			in: func() master.ShardInputs {
				in := spreadCase(eight(abc), []string{"a", "b", "a", "b", "a", "b", "a", "b"}, abc...)
				in.ISR = statemachine.Map[models.ISR]{}
				for i := range 8 {
					in.ISR = in.ISR.Set(models.ShardID("db", i), models.ISR{Term: 1, Replicas: []string{"a", "b"}})
				}
				return in
			}(), now: t0.Add(time.Hour), moves: 0, counts: map[string]int{"a": 4, "b": 4, "c": 0}},
		// After a restore the backup's in-sync sets may list c although c
		// fell behind since: a and b hold term 5, the sets are of term 1.
		{name: "stale in-sync sets (a replica holds a newer term) give leadership to nobody",
			in: func() master.ShardInputs {
				in := spreadCase(eight(abc), []string{"a", "b", "a", "b", "a", "b", "a", "b"}, abc...)
				in.ISR = statemachine.Map[models.ISR]{}
				for i := range 8 {
					in.ISR = in.ISR.Set(models.ShardID("db", i), models.ISR{Term: 1, Replicas: []string{"a", "b", "c"}})
					id := models.ShardID("db", i)
					for n, term := range map[string]int64{"a": 5, "b": 5, "c": 1} {
						rec := in.Live.At(n)
						if rec.MaxTerm == nil {
							rec.MaxTerm = map[string]int64{}
						}
						rec.MaxTerm[id] = term
						in.Live = in.Live.Set(n, rec)
					}
					in.States.Shards[i].Term = 5
				}
				return in
			}(), now: t0.Add(time.Hour), moves: 0, counts: map[string]int{"a": 4, "b": 4, "c": 0}},
		{name: "draining and dead nodes are never targets",
			in: func() master.ShardInputs {
				in := spreadCase(eight(abc), allOn("a", 8), "a", "b", "c")
				in.Drains = map[string]models.Drain{"c": {NodeID: "c"}}
				return in
			}(), now: t0.Add(time.Hour), moves: 4, counts: map[string]int{"a": 4, "b": 4, "c": 0}},
		{name: "chain: a passes to b which passes to c (no shard of a has c)",
			in: spreadCase([][]string{{"a", "b"}, {"a", "b"}, {"a", "b"}, {"b", "c"}, {"b", "c"}, {"c", "d"}},
				[]string{"a", "a", "a", "b", "b", "c"}, "a", "b", "c", "d"),
			now: t0.Add(time.Hour), moves: -1, spread: 1},
		{name: "offline shards and dead leaders are failover's business",
			in: func() master.ShardInputs {
				in := spreadCase(eight(abc), allOn("a", 8), "b", "c")
				return in
			}(), now: t0.Add(time.Hour), moves: 0},
		{name: "moves capped per decision",
			in: spreadCase(eight(abc), allOn("a", 8), abc...), now: t0.Add(delay), moves: 2, maxMove: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, changed := master.SpreadLeaders(master.SpreadInput{ShardInputs: tc.in, StableSince: t0, Now: tc.now, Delay: delay, MaxMoves: tc.maxMove})
			if tc.moves >= 0 {
				require.Len(t, changed, tc.moves)
			}
			for i, s := range next.Shards {
				prev := tc.in.States.Shards[i]
				if slices.Contains(changed, s.ID) {
					require.NotEqual(t, prev.Leader, s.Leader)
					require.Equal(t, prev.Term+1, s.Term, "a transfer is a new term")
					require.Equal(t, models.StatusOnline, s.Status)
					require.Contains(t, tc.in.Assign.Shards[i].Replicas, s.Leader)
					_, live := tc.in.Live.Get(s.Leader)
					require.True(t, live)
					_, draining := tc.in.Drains[s.Leader]
					require.False(t, draining)
				} else {
					require.Equal(t, prev, s, "shard %d unchanged", s.ID)
				}
			}
			nodes := tc.in.Live.Keys()
			got := leaderCounts(next, nodes...)
			if tc.counts != nil {
				require.Equal(t, tc.counts, got)
			}
			if tc.spread > 0 {
				require.Equal(t, tc.spread, spreadOf(got), "leaders per node %v", got)
			}
			// A second decision on the result moves nothing more, unless capped.
			if tc.maxMove == 0 {
				again := tc.in
				again.States = next
				_, more := master.SpreadLeaders(master.SpreadInput{ShardInputs: again, StableSince: t0, Now: tc.now, Delay: delay})
				require.Empty(t, more, "a balanced result is stable")
			}
		})
	}
}

// Property: on random layouts with every replica live and in sync, the result
// is always max - min <= 1 over the nodes that can lead.
func TestSpreadLeadersRandomLayouts(t *testing.T) {
	t0 := time.Unix(0, 0)
	nodes := []string{"a", "b", "c", "d", "e"}
	for seed := range 200 {
		n := 3 + seed%3
		shards := 1 + seed%17
		var reps [][]string
		var leaders []string
		for i := range shards {
			r := []string{nodes[(i+seed)%n], nodes[(i+seed+1)%n], nodes[(i+seed+2)%n]}
			reps = append(reps, r)
			leaders = append(leaders, r[0])
		}
		in := spreadCase(reps, leaders, nodes[:n]...)
		next, _ := master.SpreadLeaders(master.SpreadInput{ShardInputs: in, StableSince: t0, Now: t0})
		got := leaderCounts(next, nodes[:n]...)
		require.LessOrEqual(t, spreadOf(got), 1, fmt.Sprintf("seed %d: %v", seed, got))
	}
}

// BenchmarkSpreadLeadersBalanced: the per-pass cost of the decision for one
// database of 16 shards over 6 nodes that is already balanced (every pass
// runs it for every database once membership is stable).
func BenchmarkSpreadLeadersBalanced(b *testing.B) {
	nodes := []string{"a", "b", "c", "d", "e", "f"}
	var reps [][]string
	var leaders []string
	for i := range 16 {
		reps = append(reps, []string{nodes[i%6], nodes[(i+1)%6], nodes[(i+2)%6]})
		leaders = append(leaders, nodes[i%6])
	}
	in := master.SpreadInput{ShardInputs: spreadCase(reps, leaders, nodes...)}
	b.ReportAllocs()
	for b.Loop() {
		if _, changed := master.SpreadLeaders(in); len(changed) != 0 {
			b.Fatal("balanced input moved")
		}
	}
}
