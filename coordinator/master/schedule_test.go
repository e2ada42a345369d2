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

// The tests of Schedule build a state by hand and read no etcd and no clock:
// time is the t0 below plus what a case adds.
var t0 = time.Unix(1_000_000, 0)

const delay = 30 * time.Second

// world is a state under construction: one cluster "c", one database "db".
type world struct {
	st *statemachine.State
	rf int
}

// newWorld places shards round-robin on nodes (replicas i, i+1, ...; the
// first leads), every replica in sync.
func newWorld(nodes []string, shards, rf int) *world {
	st := &statemachine.State{
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c"}},
		Databases:       statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "c", NumShards: shards, ReplicaFactor: rf}}),
		Assignments:     statemachine.MapOf(map[string]models.Assignment{}), ShardStates: statemachine.MapOf(map[string]models.ShardStates{}),
		Drains: map[string]models.Drain{}, Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		ISR:    statemachine.NestedMapOf(map[string]map[string]models.ISR{"c": {}}),
		Synced: map[string]bool{statemachine.ClusterNodesSource("c"): true, statemachine.ClusterISRSource("c"): true},
	}
	for _, n := range nodes {
		st.Nodes = statemachine.SetIn(st.Nodes, "c", n, models.StorageNode{NodeID: n, Cluster: "c"})
	}
	a := models.Assignment{DB: "db", Cluster: "c"}
	ss := models.ShardStates{DB: "db"}
	for i := range shards {
		var reps []string
		for j := range rf {
			reps = append(reps, nodes[(i+j)%len(nodes)])
		}
		a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: reps})
		ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: reps[0], Term: 1, Status: models.StatusOnline})
		st.ISR = statemachine.SetIn(st.ISR, "c", models.ShardID("db", i), models.ISR{Leader: reps[0], Term: 1, Replicas: slices.Clone(reps)})
	}
	st.Assignments, st.ShardStates = st.Assignments.Set("db", a), st.ShardStates.Set("db", ss)
	return &world{st: st, rf: rf}
}

func (w *world) addNode(n string) {
	w.st.Nodes = statemachine.SetIn(w.st.Nodes, "c", n, models.StorageNode{NodeID: n, Cluster: "c"})
}
func (w *world) kill(n string) { w.st.Nodes = statemachine.DeleteIn(w.st.Nodes, "c", n) }

// stable: membership as seen now, unchanged since `since`, last balanced at
// the signature `balanced`.
func (w *world) members(since time.Time, balanced string) map[string]master.Membership {
	return map[string]master.Membership{"c": {Sig: master.MembershipSig(w.st, "c"), Since: since, Balanced: balanced}}
}

// failover is what the master's failover decides for w's database, its
// replicas answering nothing.
func (w *world) failover(now time.Time) []master.Operator {
	live := w.st.Nodes.At("c")
	in := master.ShardInputs{DB: "db", Assign: w.st.Assignments.At("db"), States: w.st.ShardStates.At("db"), Live: live,
		ISR: w.st.ISR.At("c"), Drains: w.st.Drains, ClusterID: w.st.ListedFrom[statemachine.ClusterISRSource("c")],
		RecordedTerms: master.RecordedTerms(live), SeenTerms: master.SeenTerms(live),
		Leads: master.ClusterLeads(w.st.ShardStates, w.st.Assignments, "c")}
	return master.FailoverOps(w.st, in, 0, now)
}

func (w *world) sig() string { return master.MembershipSig(w.st, "c") }

// execute carries operators out on the state the way the executor does,
// one step per round (an added replica catches up one round later), and
// checks after every round that no shard has fewer replicas than the
// replica factor or fewer in-sync replicas than before. It returns the
// rounds it took.
func (w *world) execute(t *testing.T, ops []master.Operator) int {
	t.Helper()
	st := w.st
	caughtUp := map[string][]string{} // shard -> replicas in sync next round
	for round := 1; round <= 200; round++ {
		for id, reps := range caughtUp {
			set := st.ISR.At("c").At(id)
			set.Replicas = union(set.Replicas, reps)
			st.ISR = statemachine.SetIn(st.ISR, "c", id, set)
		}
		clear(caughtUp)
		var left []master.Operator
		for _, o := range ops {
			a := st.Assignments.At(o.DB)
			ss := st.ShardStates.At(o.DB)
			sh := &a.Shards[o.Shard]
			s := &ss.Shards[o.Shard]
			id := models.ShardID(o.DB, o.Shard)
			before := len(st.ISR.At("c").At(id).Replicas)
			switch step := master.NextStep(o, st); step {
			case master.StepAdd:
				added := minus(o.To, sh.Replicas)
				sh.Replicas = union(sh.Replicas, o.To)
				caughtUp[id] = added
			case master.StepWaitSync:
			case master.StepLeaveLeader:
				for _, n := range o.To {
					if _, live := st.Nodes.At("c").Get(n); live && slices.Contains(st.ISR.At("c").At(id).Replicas, n) {
						s.Leader, s.Term = n, s.Term+1
						break
					}
				}
			case master.StepRemove:
				require.Contains(t, o.To, s.Leader, "a leader removed from under itself")
				sh.Replicas = slices.Clone(o.To)
				set := st.ISR.At("c").At(id)
				set.Replicas = intersect(set.Replicas, o.To)
				st.ISR = statemachine.SetIn(st.ISR, "c", id, set)
			case master.StepLeader:
				s.Leader, s.Term = o.Leader, s.Term+1
			case master.StepDone:
				continue
			default:
				t.Fatalf("operator %+v: unexpected step %s", o, step)
			}
			left = append(left, o)
			require.GreaterOrEqual(t, len(sh.Replicas), min(w.rf, len(o.To)), "shard %s below its replica factor", id)
			require.GreaterOrEqual(t, len(st.ISR.At("c").At(id).Replicas), min(before, len(o.To)), "shard %s lost in-sync replicas", id)
		}
		if len(left) == 0 {
			return round
		}
		ops = left
	}
	t.Fatal("operators did not finish in 200 rounds")
	return 0
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// perNode counts replicas and (online) leaders per live node.
func (w *world) perNode() (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for n := range w.st.Nodes.At("c").All() {
		replicas[n], leaders[n] = 0, 0
	}
	for _, sh := range w.st.Assignments.At("db").Shards {
		for _, n := range sh.Replicas {
			replicas[n]++
		}
	}
	for _, s := range w.st.ShardStates.At("db").Shards {
		if s.Status == models.StatusOnline {
			leaders[s.Leader]++
		}
	}
	return replicas, leaders
}

func maxMinusMin(m map[string]int) int {
	vs := slices.Collect(maps.Values(m))
	return slices.Max(vs) - slices.Min(vs)
}

func kinds(ops []master.Operator) map[master.OpKind]int {
	out := map[master.OpKind]int{}
	for _, o := range ops {
		out[o.Kind]++
	}
	return out
}

func TestSchedule(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	cases := []struct {
		name string
		// setup builds the world and the input at the decision's time.
		setup func(w *world) master.Input
		check func(t *testing.T, w *world, d master.Decision)
	}{{
		name: "node added: nothing before the delay",
		setup: func(w *world) master.Input {
			old := w.sig()
			w.addNode("n4")
			return master.Input{State: w.st, Now: t0.Add(delay - time.Second), Delay: delay, Members: w.members(t0, old)}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.Empty(t, d.Operators(), "a membership change younger than the delay moves nothing")
		},
	}, {
		name: "node added: moves equal the lower bound once stable",
		setup: func(w *world) master.Input {
			old := w.sig()
			w.addNode("n4")
			return master.Input{State: w.st, Now: t0.Add(delay), Delay: delay, Members: w.members(t0, old)}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.True(t, d.Planned)
			require.NotZero(t, d.Relocations)
			require.Equal(t, d.LowerBound, d.Relocations)
			moved := 0
			for _, o := range d.Plan {
				if o.Kind == master.OpMove {
					require.Equal(t, []string{"n4"}, minus(o.To, o.From), "every move goes to the new node")
					require.Len(t, minus(o.From, o.To), 1)
					moved++
				}
			}
			require.Equal(t, d.Relocations, moved, "one operator per relocated replica")
			w.execute(t, d.Plan)
			reps, leaders := w.perNode()
			require.LessOrEqual(t, maxMinusMin(reps), 1, "replicas %v", reps)
			require.LessOrEqual(t, maxMinusMin(leaders), 1, "leaders %v", leaders)
		},
	}, {
		name: "node removed: failover now, moves after the delay",
		setup: func(w *world) master.Input {
			old := w.sig()
			w.kill("n3")
			return master.Input{State: w.st, Now: t0.Add(delay), Delay: delay, Members: w.members(t0, old)}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			led := 0
			for _, s := range w.st.ShardStates.At("db").Shards {
				if s.Leader == "n3" {
					led++
				}
			}
			fo := w.failover(t0)
			require.Len(t, fo, led)
			for _, o := range fo {
				require.Equal(t, master.OpFailover, o.Kind)
				require.NotEqual(t, "n3", o.Leader)
				require.Equal(t, int64(2), o.Term)
			}
			require.NotEmpty(t, d.Plan)
			for _, o := range d.Plan {
				if o.Kind == master.OpMove {
					require.Contains(t, o.From, "n3")
					require.NotContains(t, o.To, "n3")
				}
			}
		},
	}, {
		name: "drain: at once, leadership handed off before the replica goes",
		setup: func(w *world) master.Input {
			w.st.Drains["n1"] = models.Drain{NodeID: "n1"}
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.NotEmpty(t, d.Plan)
			for _, o := range d.Plan {
				require.NotContains(t, o.To, "n1")
			}
			w.execute(t, d.Plan)
			reps, leaders := w.perNode()
			require.Zero(t, reps["n1"])
			require.Zero(t, leaders["n1"])
		},
	}, {
		name: "replica factor up: adds only, no relocation",
		setup: func(w *world) master.Input {
			db := w.st.Databases.At("db")
			db.ReplicaFactor = 3
			w.st.Databases = w.st.Databases.Set("db", db)
			w.rf = 3
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.Zero(t, d.Relocations)
			require.Equal(t, 6, kinds(d.Plan)[master.OpMove])
			for _, o := range d.Plan {
				if o.Kind == master.OpMove {
					require.Len(t, o.To, 3)
					require.Equal(t, master.StepAdd, o.Step)
				}
			}
			w.execute(t, d.Plan)
			for _, sh := range w.st.Assignments.At("db").Shards {
				require.Len(t, sh.Replicas, 3)
			}
		},
	}, {
		name: "replica factor down: removes only, never below the new factor",
		setup: func(w *world) master.Input {
			db := w.st.Databases.At("db")
			db.ReplicaFactor = 1
			w.st.Databases = w.st.Databases.Set("db", db)
			w.rf = 1
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.Equal(t, 6, kinds(d.Plan)[master.OpMove])
			for _, o := range d.Plan {
				if o.Kind == master.OpMove {
					require.Len(t, o.To, 1)
					require.Empty(t, minus(o.To, o.From))
				}
			}
			w.execute(t, d.Plan)
			reps, _ := w.perNode()
			require.Equal(t, 6, reps["n1"]+reps["n2"]+reps["n3"])
			require.LessOrEqual(t, maxMinusMin(reps), 1)
		},
	}, {
		name: "leader balance after a node returns: spread once stable",
		setup: func(w *world) master.Input {
			// n3 was away: n1 and n2 took its leaderships.
			ss := w.st.ShardStates.At("db")
			for i, s := range ss.Shards {
				if s.Leader == "n3" {
					ss.Shards[i].Leader = w.st.Assignments.At("db").Shards[i].Replicas[1]
					ss.Shards[i].Term = 2
				}
			}
			return master.Input{State: w.st, Now: t0.Add(delay), Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.Empty(t, d.Plan)
			require.NotEmpty(t, d.Spread)
			require.LessOrEqual(t, len(d.Spread), 3)
			for _, o := range d.Spread {
				require.Equal(t, master.OpLeader, o.Kind)
				require.Equal(t, master.StepLeader, master.NextStep(o, w.st))
			}
			w.execute(t, d.Spread)
			_, leaders := w.perNode()
			require.Equal(t, map[string]int{"n1": 2, "n2": 2, "n3": 2}, leaders)
		},
	}, {
		name: "leader balance after a node returns: nothing before the delay",
		setup: func(w *world) master.Input {
			ss := w.st.ShardStates.At("db")
			for i, s := range ss.Shards {
				if s.Leader == "n3" {
					ss.Shards[i].Leader = w.st.Assignments.At("db").Shards[i].Replicas[1]
				}
			}
			return master.Input{State: w.st, Now: t0.Add(time.Second), Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.Empty(t, d.Operators())
		},
	}, {
		name: "failover with an in-sync candidate",
		setup: func(w *world) master.Input {
			w.kill("n1")
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			fo := w.failover(t0)
			require.Len(t, fo, 2)
			for _, o := range fo {
				require.Equal(t, master.OpFailover, o.Kind)
				require.Equal(t, w.st.Assignments.At("db").Shards[o.Shard].Replicas[1], o.Leader)
				require.Equal(t, int64(2), o.Term)
			}
		},
	}, {
		name: "failover without an in-sync candidate: offline",
		setup: func(w *world) master.Input {
			// Shard 0 (n1, n2): n2 fell behind, then n1 died.
			w.st.ISR = statemachine.SetIn(w.st.ISR, "c", models.ShardID("db", 0), models.ISR{Leader: "n1", Term: 1, Replicas: []string{"n1"}})
			w.kill("n1")
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			got := map[int]master.Operator{}
			for _, o := range w.failover(t0) {
				got[o.Shard] = o
			}
			require.Equal(t, master.OpOffline, got[0].Kind)
			require.Contains(t, got[0].Reason, "no live in-sync replica")
			require.Equal(t, master.OpFailover, got[3].Kind, "shard 3 (n1, n2) with n2 in sync fails over")
			require.Equal(t, "n2", got[3].Leader)
		},
	}, {
		name: "operators in flight: no new plan",
		setup: func(w *world) master.Input {
			w.st.Drains["n1"] = models.Drain{NodeID: "n1"}
			inflight := master.Operator{DB: "db", Shard: 0, Kind: master.OpMove, From: []string{"n1", "n2"}, To: []string{"n2", "n3"}}
			return master.Input{State: w.st, Now: t0, Delay: delay, Members: w.members(t0, w.sig()), InFlight: []master.Operator{inflight}}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.False(t, d.Planned)
			require.Empty(t, d.Plan)
			require.Empty(t, d.Spread)
		},
	}, {
		name: "balanced and stable: nothing",
		setup: func(w *world) master.Input {
			return master.Input{State: w.st, Now: t0.Add(time.Hour), Delay: delay, Members: w.members(t0, w.sig())}
		},
		check: func(t *testing.T, w *world, d master.Decision) {
			require.False(t, d.Planned)
			require.Empty(t, d.Operators())
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(nodes, 6, 2)
			in := tc.setup(w)
			d := master.Schedule(in)
			require.NoError(t, d.Err)
			// Deterministic: the same input gives the same operators.
			require.Equal(t, d, master.Schedule(in))
			tc.check(t, w, d)
		})
	}
}

// A larger cluster: adding nodes moves exactly the lower bound, and carrying
// the operators out keeps every shard at its replica factor.
func TestScheduleNodeAddedAtScale(t *testing.T) {
	for _, tc := range []struct{ nodes, add, shards, rf int }{{3, 1, 64, 2}, {5, 2, 100, 3}, {4, 4, 40, 1}} {
		t.Run(fmt.Sprintf("%d+%d nodes %d shards rf %d", tc.nodes, tc.add, tc.shards, tc.rf), func(t *testing.T) {
			var nodes []string
			for i := range tc.nodes {
				nodes = append(nodes, fmt.Sprintf("n%02d", i))
			}
			w := newWorld(nodes, tc.shards, tc.rf)
			old := w.sig()
			for i := range tc.add {
				w.addNode(fmt.Sprintf("m%02d", i))
			}
			d := master.Schedule(master.Input{State: w.st, Now: t0.Add(delay), Delay: delay, Members: w.members(t0, old)})
			require.NoError(t, d.Err)
			require.Equal(t, d.LowerBound, d.Relocations)
			w.execute(t, d.Plan)
			reps, _ := w.perNode()
			require.LessOrEqual(t, maxMinusMin(reps), 1, "replicas %v", reps)
		})
	}
}

// NextStep reads progress from the state only: each stage of a move in turn.
func TestNextStep(t *testing.T) {
	w := newWorld([]string{"n1", "n2", "n3"}, 1, 2) // shard 0 on n1 (leader), n2
	o := master.Operator{DB: "db", Shard: 0, Kind: master.OpMove, From: []string{"n1", "n2"}, To: []string{"n2", "n3"}, Leader: "n3"}
	require.Equal(t, master.StepAdd, master.NextStep(o, w.st))
	a := w.st.Assignments.At("db")
	a.Shards[0].Replicas = []string{"n1", "n2", "n3"}
	require.Equal(t, master.StepWaitSync, master.NextStep(o, w.st))
	isr := w.st.ISR.At("c").At("db/0")
	isr.Replicas = []string{"n1", "n2", "n3"}
	w.st.ISR = statemachine.SetIn(w.st.ISR, "c", "db/0", isr)
	require.Equal(t, master.StepLeaveLeader, master.NextStep(o, w.st), "n1 leads and leaves")
	w.st.ShardStates.At("db").Shards[0].Leader = "n2"
	require.Equal(t, master.StepRemove, master.NextStep(o, w.st))
	a.Shards[0].Replicas = []string{"n2", "n3"}
	require.Equal(t, master.StepLeader, master.NextStep(o, w.st))
	w.st.ShardStates.At("db").Shards[0].Leader = "n3"
	require.Equal(t, master.StepDone, master.NextStep(o, w.st))

	// A target that dies before it holds the replica cancels the operator.
	w2 := newWorld([]string{"n1", "n2", "n3"}, 1, 2)
	w2.kill("n3")
	require.Equal(t, master.StepCancel, master.NextStep(o, w2.st))
	// So does a dropped database.
	w2.st.Databases = w2.st.Databases.Delete("db")
	require.Equal(t, master.StepCancel, master.NextStep(o, w2.st))
}

// A leader transfer's step: graceful only to a live, in-sync, non-draining
// replica of an online shard; unclean to any live replica, offline shard
// included. Anything else is done (dropped), never stuck.
func TestNextStepLeaderTransfer(t *testing.T) {
	cases := []struct {
		name    string
		unclean bool
		change  func(w *world) // shard 0 on n1 (leader, term 1), n2; in sync both
		want    master.Step
	}{
		{"graceful to an in-sync replica", false, func(*world) {}, master.StepLeader},
		{"already leads", false, func(w *world) { w.st.ShardStates.At("db").Shards[0].Leader = "n2" }, master.StepDone},
		{"target out of the in-sync set", false, func(w *world) { setISR(w, "n1") }, master.StepDone},
		{"unclean to an out-of-sync replica", true, func(w *world) { setISR(w, "n1") }, master.StepLeader},
		{"target draining", false, func(w *world) { w.st.Drains["n2"] = models.Drain{} }, master.StepDone},
		{"target dead", true, func(w *world) { w.kill("n2") }, master.StepDone},
		{"target not a replica", true, func(w *world) { w.st.Assignments.At("db").Shards[0].Replicas = []string{"n1", "n3"} }, master.StepDone},
		{"offline shard, graceful", false, func(w *world) { w.st.ShardStates.At("db").Shards[0].Status = models.StatusOffline }, master.StepDone},
		{"offline shard, unclean", true, func(w *world) { w.st.ShardStates.At("db").Shards[0].Status = models.StatusOffline }, master.StepLeader},
		{"offline shard led by the target, unclean", true, func(w *world) {
			w.st.ShardStates.At("db").Shards[0] = models.ShardState{ID: 0, Leader: "n2", Term: 1, Status: models.StatusOffline}
		}, master.StepLeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld([]string{"n1", "n2", "n3"}, 1, 2)
			c.change(w)
			o := master.Operator{DB: "db", Shard: 0, Kind: master.OpLeader, Leader: "n2", Unclean: c.unclean, Step: master.StepLeader}
			require.Equal(t, c.want, master.NextStep(o, w.st))
		})
	}
}

func setISR(w *world, replicas ...string) {
	isr := w.st.ISR.At("c").At("db/0")
	isr.Replicas = replicas
	w.st.ISR = statemachine.SetIn(w.st.ISR, "c", "db/0", isr)
}
