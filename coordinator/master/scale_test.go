package master

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// decisions summarises what the master decided for one run of the scripted
// events, in terms that do not depend on the cluster's size when every size
// holds the same replicas and leaders per node.
type decisions struct {
	ReplicasPerNode, LeadersPerNode  placement.MinMax // after placement
	KillChanged                      int              // shards whose leader changed when one node died
	KillMaxTermBump                  int64
	DeadRelocations                  int // a rebalance plan with the node still gone
	DeadPlanReplicaSpread            int // max - min replicas over live nodes, after that plan
	RejoinChanged, RejoinRelocations int // the node back: failover and rebalance decisions
	RejoinLeadersToNode              int // leaderships the plan gives back to it
	RejoinPlanLeadersPerNode         placement.MinMax
}

// runScaled plays: nodes register, databases are created (4 shards x RF 3
// each, as many databases as nodes: 12 replicas and 4 leaderships per node),
// one node dies, then comes back; through the master's own decision
// functions on its own state, checking the invariants at every step. The
// databases are placed one by one (created apart) or, together, by one
// decision for all of them (created at once: placeNew).
func runScaled(t testing.TB, nodes int, together bool) decisions {
	const shards, rf = 4, 3
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		Databases: statemachine.MapOf(map[string]models.Database{}), Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}), ISR: statemachine.NestedMapOf(map[string]map[string]models.ISR{}), Drains: map[string]models.Drain{},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c"}}}
	ids := make([]string, nodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%05d", i)
		st.Nodes = statemachine.SetIn(st.Nodes, "c", ids[i], models.StorageNode{NodeID: ids[i], NodeAddress: ids[i] + ":1", Cluster: "c"})
	}
	add := map[placement.ShardKey]int{}
	for i := range nodes {
		db := models.Database{Name: fmt.Sprintf("db%05d", i), StorageCluster: "c", NumShards: shards, ReplicaFactor: rf}
		st.Databases = st.Databases.Set(db.Name, db)
		if together {
			for s := range shards {
				add[placement.ShardKey{DB: db.Name, Shard: s}] = rf
			}
			continue
		}
		p, err := placeBatch(loaded(clusterView(st, "c")), []growth{{db: db}})
		require.NoError(t, err)
		st.Assignments = st.Assignments.Set(db.Name, p[0].assign)
		st.ShardStates = st.ShardStates.Set(db.Name, p[0].states)
	}
	if together {
		plan, err := loaded(clusterView(st, "c")).PlaceNew(add)
		require.NoError(t, err)
		for name := range st.Databases.All() {
			a, ss := models.Assignment{DB: name, Cluster: "c"}, models.ShardStates{DB: name}
			for s := range shards {
				tg := plan.Target[placement.ShardKey{DB: name, Shard: s}]
				a.Shards = append(a.Shards, models.ShardAssignment{ID: s, Replicas: tg.Replicas})
				ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: tg.Leader, Term: 1, Status: models.StatusOnline})
			}
			st.Assignments, st.ShardStates = st.Assignments.Set(name, a), st.ShardStates.Set(name, ss)
		}
	}
	var d decisions
	reps, leads := perNode(st, ids)
	for _, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			require.Len(t, sh.Replicas, rf)
			require.Len(t, uniq(sh.Replicas), rf, "replicas of one shard never share a node")
		}
	}
	d.ReplicasPerNode, d.LeadersPerNode = minMaxOf(reps, ids), minMaxOf(leads, ids)

	// One node dies: the master re-elects every shard it led among the
	// survivors (all in sync: nothing was written), term + 1.
	victim := ids[0] // the node leading the most shards (lowest id among them)
	for _, n := range ids {
		if leads[n] > leads[victim] {
			victim = n
		}
	}
	st.Nodes = statemachine.DeleteIn(st.Nodes, "c", victim)
	live := slices.DeleteFunc(slices.Clone(ids), func(n string) bool { return n == victim })
	before := st.ShardStates
	clusterLeads := ClusterLeads(st.ShardStates, st.Assignments, "c")
	for _, name := range st.Assignments.Keys() { // the master's order
		a := st.Assignments.At(name)
		next, changed := PlanLeaders(ShardInputs{DB: name, Assign: a, States: st.ShardStates.At(name), Live: st.Nodes.At("c"), Leads: clusterLeads})
		d.KillChanged += len(changed)
		for _, s := range next.Shards {
			require.Equal(t, models.StatusOnline, s.Status)
			require.NotEqual(t, victim, s.Leader)
			require.Contains(t, a.Shards[s.ID].Replicas, s.Leader)
			old := before.At(name).Shards[s.ID]
			if old.Leader == victim {
				require.Contains(t, changed, s.ID)
			}
			d.KillMaxTermBump = max(d.KillMaxTermBump, s.Term-old.Term)
		}
		st.ShardStates = st.ShardStates.Set(name, next)
	}
	_, after := perNode(st, live)
	for _, n := range live {
		// Each shard could only go to its two surviving replicas: a
		// survivor gains at most the shards it shares with the victim.
		require.LessOrEqual(t, after[n]-leads[n], 2, "node %s", n)
	}

	// While it is gone, a rebalance would move its replicas to the others.
	plan, _, err := planFor(clusterView(st, "c"))
	require.NoError(t, err)
	d.DeadRelocations = plan.Relocations
	dp := minMaxOf(targetReplicas(plan), live)
	d.DeadPlanReplicaSpread = dp.Max - dp.Min

	// It comes back before that ran: nothing fails over, and the plan only
	// gives it leaderships back.
	st.Nodes = statemachine.SetIn(st.Nodes, "c", victim, models.StorageNode{NodeID: victim, NodeAddress: victim + ":1", Cluster: "c"})
	for name, a := range st.Assignments.All() {
		_, changed := PlanLeaders(ShardInputs{DB: name, Assign: a, States: st.ShardStates.At(name), Live: st.Nodes.At("c")})
		d.RejoinChanged += len(changed)
	}
	plan, _, err = planFor(clusterView(st, "c"))
	require.NoError(t, err)
	d.RejoinRelocations = plan.Relocations
	for _, mv := range plan.Moves {
		if mv.Kind == placement.MoveLeader && mv.To == victim {
			d.RejoinLeadersToNode++
		}
	}
	tl := map[string]int{}
	for _, sp := range plan.Target {
		tl[sp.Leader]++
	}
	d.RejoinPlanLeadersPerNode = minMaxOf(tl, ids)
	return d
}

func perNode(st *statemachine.State, ids []string) (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for _, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			for _, n := range sh.Replicas {
				replicas[n]++
			}
		}
	}
	for _, ss := range st.ShardStates.All() {
		for _, s := range ss.Shards {
			leaders[s.Leader]++
		}
	}
	return replicas, leaders
}

func targetReplicas(p placement.Plan) map[string]int {
	out := map[string]int{}
	for _, sp := range p.Target {
		for _, n := range sp.Replicas {
			out[n]++
		}
	}
	return out
}

func minMaxOf(c map[string]int, ids []string) placement.MinMax {
	mm := placement.MinMax{Min: c[ids[0]], Max: c[ids[0]]}
	for _, n := range ids {
		mm.Min, mm.Max = min(mm.Min, c[n]), max(mm.Max, c[n])
	}
	return mm
}

func uniq(s []string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }

// 1,000 nodes registering, 1,000 databases created, one node killed and
// rejoining give the same decisions as the same events at 10 nodes: the same
// replicas and leaders per node, the same number of shards failed over with
// the same term bump and leadership spread, the same relocations planned
// while the node is gone and none once it is back.
//
// Databases created together (the master places them with one decision) are
// checked at 1,000 nodes; placed one by one (each decision reads the whole
// cluster), at 200 here and at 1,000 by BenchmarkPlacementDecisionsOneByOne,
// to keep the test within a CI budget under -race.
func TestPlacementDecisionsScaleFrom10To1000Nodes(t *testing.T) {
	t.Run("placed_together", func(t *testing.T) { checkScaled(t, 1000, true) })
	t.Run("placed_one_by_one", func(t *testing.T) { checkScaled(t, 200, false) })
}

func BenchmarkPlacementDecisionsOneByOne(b *testing.B) {
	for range b.N {
		checkScaled(b, 1000, false)
	}
}

func checkScaled(t testing.TB, nodes int, together bool) {
	small := runScaled(t, 10, together)
	big := runScaled(t, nodes, together)
	require.Equal(t, small, big)
	// And the decisions are the right ones, not just equal.
	require.Equal(t, placement.MinMax{Min: 12, Max: 12}, small.ReplicasPerNode)
	// New databases are placed one by one: leaderships within one of the
	// mean, not exact (a rebalance makes them exact, below).
	require.LessOrEqual(t, small.LeadersPerNode.Max-small.LeadersPerNode.Min, 2)
	require.Equal(t, small.LeadersPerNode.Max, small.KillChanged, "the victim led the most shards")
	require.EqualValues(t, 1, small.KillMaxTermBump)
	require.Equal(t, 12, small.DeadRelocations)
	require.LessOrEqual(t, small.DeadPlanReplicaSpread, 1)
	require.Zero(t, small.RejoinChanged)
	require.Zero(t, small.RejoinRelocations)
	require.Equal(t, 4, small.RejoinLeadersToNode)
	require.Equal(t, placement.MinMax{Min: 4, Max: 4}, small.RejoinPlanLeadersPerNode)
}
