package placement

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkPlan asserts every invariant of a plan for c and returns it.
func checkPlan(t *testing.T, c Cluster, plan Plan) {
	t.Helper()
	live := map[string]bool{}
	for _, n := range c.Nodes {
		if !n.Draining {
			live[n.ID] = true
		}
	}
	for _, n := range c.Nodes {
		if n.Draining {
			delete(live, n.ID)
		}
	}
	require.Len(t, plan.Target, len(c.Want), "target has exactly the wanted shards")

	replicas := map[string]int{}
	leaders := map[string]int{}
	for id := range live {
		replicas[id], leaders[id] = 0, 0
	}
	relocations := 0
	for k, want := range c.Want {
		sp, ok := plan.Target[k]
		require.True(t, ok, "shard %s placed", k)
		require.Len(t, sp.Replicas, want, "shard %s replica count", k)
		seen := map[string]bool{}
		for _, id := range sp.Replicas {
			require.False(t, seen[id], "shard %s has two replicas on %s", k, id)
			seen[id] = true
			require.True(t, live[id], "shard %s on %s which is not a live non-draining node", k, id)
			replicas[id]++
		}
		require.Contains(t, sp.Replicas, sp.Leader, "shard %s leader is a replica", k)
		leaders[sp.Leader]++

		cur := dedup(c.Shards[k].Replicas)
		kept := 0
		for _, id := range cur {
			if seen[id] {
				kept++
			}
		}
		relocations += min(want, len(cur)) - kept
	}
	rs, ls := spreadOf(replicas), spreadOf(leaders)
	require.LessOrEqual(t, rs.Max-rs.Min, 1, "replica spread %v", replicas)
	if ls.Max-ls.Min > 1 {
		// Allowed only when the replica layout makes it impossible, which
		// an exact flow over the target decides.
		require.False(t, leadersBalanceable(plan.Target, replicas), "leader spread %v", leaders)
	}
	require.Equal(t, relocations, plan.Relocations, "relocations recount")
	require.Equal(t, LowerBound(c), plan.Relocations, "relocations equal the lower bound")

	checkMoves(t, c, plan)

	again, err := Place(c)
	require.NoError(t, err)
	require.Equal(t, plan, again, "same input, same plan")
}

// checkMoves replays the moves over the current placement: they must lead to
// the target, never lower a shard's replica count below what it had (or
// wants), and only hand leadership to an existing replica.
func checkMoves(t *testing.T, c Cluster, plan Plan) {
	t.Helper()
	state := map[ShardKey][]string{}
	leader := map[ShardKey]string{}
	for k, sp := range c.Shards {
		state[k] = dedup(sp.Replicas)
		leader[k] = sp.Leader
	}
	floor := map[ShardKey]int{}
	for k, r := range state {
		floor[k] = min(len(r), c.Want[k])
	}
	for _, m := range plan.Moves {
		switch m.Kind {
		case MoveAdd:
			require.NotContains(t, state[m.Shard], m.To)
			state[m.Shard] = append(state[m.Shard], m.To)
		case MoveRemove:
			require.Contains(t, state[m.Shard], m.From)
			state[m.Shard] = slices.DeleteFunc(state[m.Shard], func(s string) bool { return s == m.From })
			require.GreaterOrEqual(t, len(state[m.Shard]), floor[m.Shard], "remove of %s lowers %s", m.From, m.Shard)
		case MoveLeader:
			require.Equal(t, leader[m.Shard], m.From)
			require.Contains(t, state[m.Shard], m.To)
			leader[m.Shard] = m.To
		default:
			t.Fatalf("unknown move kind %q", m.Kind)
		}
	}
	for k, sp := range plan.Target {
		require.ElementsMatch(t, sp.Replicas, state[k], "moves reach target for %s", k)
		require.Equal(t, sp.Leader, leader[k])
	}
	for k, r := range state {
		if _, ok := plan.Target[k]; !ok {
			require.Empty(t, r, "dropped shard %s still has replicas", k)
		}
	}
}

func spreadOf(m map[string]int) MinMax { return minMax(m) }

// cluster builds a cluster of live nodes with one database of p shards x r.
func cluster(nodes []string, db string, p, r int) Cluster {
	c := Cluster{Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
	for _, id := range nodes {
		c.Nodes = append(c.Nodes, Node{ID: id})
	}
	for i := range p {
		c.Want[ShardKey{db, i}] = r
	}
	return c
}

// next returns c with the current placement replaced by plan's target.
func next(c Cluster, plan Plan) Cluster {
	out := Cluster{Nodes: slices.Clone(c.Nodes), Shards: plan.Target, Want: map[ShardKey]int{}}
	for k, v := range c.Want {
		out.Want[k] = v
	}
	return out
}

func mustPlace(t *testing.T, c Cluster) Plan {
	t.Helper()
	plan, err := Place(c)
	require.NoError(t, err)
	checkPlan(t, c, plan)
	return plan
}

// leadersBalanceable reports whether some choice of leaders among the target
// replicas gives every node between floor and ceil of shards/nodes leaders:
// a flow shard -> replica node -> sink with floor per node plus the
// remainder shared must carry one unit per shard.
func leadersBalanceable(target map[ShardKey]ShardPlacement, nodes map[string]int) bool {
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	keys := make([]ShardKey, 0, len(target))
	for k := range target {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	g := &flowGraph{}
	g.init(3 + len(keys) + len(ids))
	node := func(id string) int { return 3 + len(keys) + slices.Index(ids, id) }
	for i, k := range keys {
		g.edge(0, 3+i, 1, 0)
		for _, id := range target[k].Replicas {
			g.edge(3+i, node(id), 1, 0)
		}
	}
	lo := len(keys) / len(ids)
	for _, id := range ids {
		g.edge(node(id), 1, lo, 0)
		g.edge(node(id), 2, 1, 0)
	}
	g.edge(2, 1, len(keys)%len(ids), 0)
	flow, _ := g.minCostFlow(0, 1)
	return flow == len(keys)
}
