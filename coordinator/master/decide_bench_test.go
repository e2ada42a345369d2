package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// domainState is a cluster of nodes in 3 failure domains (node i in domain
// i%3) holding dbs databases of shards shards, each shard with one replica
// per domain, its leader spread over the domains, an in-sync set of all
// three written in this etcd cluster and every replica's record holding its
// term. Without the nodes of domain dead, if dead.
func domainState(nodes, dbs, shards int, dead bool, killed int) *statemachine.State {
	const c, etcdID = "c", 7
	recs := map[string]models.StorageNode{}
	name := func(i int) string { return fmt.Sprintf("n%04d", i) }
	for i := range nodes {
		recs[name(i)] = models.StorageNode{NodeID: name(i), NodeAddress: name(i) + ":1",
			MaxTerm: map[string]int64{}, SeenTerm: map[string]int64{}}
	}
	isr := map[string]models.ISR{}
	var assigns []models.Assignment
	var states []models.ShardStates
	g := 0
	for d := range dbs {
		db := fmt.Sprintf("db%04d", d)
		a := models.Assignment{DB: db, Cluster: c}
		ss := models.ShardStates{DB: db}
		for s := range shards {
			// one replica per domain: nodes 3k, 3k+1, 3k+2 of a spread k
			k := (g * 7) % (nodes / 3)
			reps := []string{name(3 * k), name(3*k + 1), name(3*k + 2)}
			leader := reps[g%3]
			a.Shards = append(a.Shards, models.ShardAssignment{ID: s, Replicas: reps})
			ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: leader, Term: 1, Status: models.StatusOnline})
			id := models.ShardID(db, s)
			isr[id] = models.ISR{Leader: leader, Term: 1, Replicas: reps, ClusterID: etcdID}
			for _, r := range reps {
				recs[r].MaxTerm[id], recs[r].SeenTerm[id] = 1, 1
			}
			g++
		}
		assigns, states = append(assigns, a), append(states, ss)
	}
	if dead {
		for i := range nodes {
			if i%3 == killed {
				delete(recs, name(i))
			}
		}
	}
	am, sm := map[string]models.Assignment{}, map[string]models.ShardStates{}
	for i := range assigns {
		am[assigns[i].DB], sm[states[i].DB] = assigns[i], states[i]
	}
	return &statemachine.State{
		Assignments: statemachine.MapOf(am),
		ShardStates: statemachine.MapOf(sm),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{c: recs}),
		ISR:         statemachine.NestedMapOf(map[string]map[string]models.ISR{c: isr}),
		Synced:      map[string]bool{statemachine.ClusterNodesSource(c): true, statemachine.ClusterISRSource(c): true},
		ListedFrom:  map[string]uint64{statemachine.ClusterISRSource(c): etcdID},
		Revisions:   map[string]int64{},
	}
}

// BenchmarkDomainFailoverDecisions is the master's CPU in a failover pass
// at 1,000 nodes x 1,000 databases x 32 shards, without the round and the
// publication: "check" looks at every database with every node live (what
// a pass pays for each database its events made it forget); "domain"
// decides the new leaders of every shard a dead domain led (~10,700).
func BenchmarkDomainFailoverDecisions(b *testing.B) {
	const nodes, dbs, shards = 999, 1000, 32
	for _, tc := range []struct {
		name string
		dead bool
	}{{"check", false}, {"domain", true}} {
		st := domainState(nodes, dbs, shards, tc.dead, 0)
		names := st.Assignments.Keys()
		var d derived
		answers := everyLiveAnswers(&d, st, names)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			changed := 0
			for range b.N {
				changed = 0
				leads := map[string]int(nil)
				for _, name := range names {
					in, ok := d.failoverInputs(st, name)
					if !ok {
						continue
					}
					if in, ok = withView(in); !ok {
						continue
					}
					if leads == nil {
						leads = d.clusterLeads(st, in.Assign.Cluster)
					}
					in.Leads, in.Answers = leads, answers[name]
					changed += len(FailoverOps(st, in, 2, time.Unix(0, 0)))
				}
			}
			b.ReportMetric(float64(changed), "shards-decided")
		})
	}
}

// BenchmarkDomainFailoverPass is the master's CPU in the second pass of a
// dead domain's failover at 1,000 nodes x 1,000 databases x 32 shards
// (every database lost a leader, ~10,700 shards), without the round's
// wait and the publication: each database's inputs and check, the
// round's questions (newRound) and the decisions (FailoverOps), every live
// replica of a shard that needs a leader answering.
func BenchmarkDomainFailoverPass(b *testing.B) {
	const nodes, dbs, shards = 999, 1000, 32
	st := domainState(nodes, dbs, shards, true, 0)
	names := st.Assignments.Keys()
	var d derived
	answers := everyLiveAnswers(&d, st, names)
	b.ReportAllocs()
	changed, asked := 0, 0
	for range b.N {
		changed, asked = 0, 0
		var ins []ShardInputs
		for _, name := range names {
			in, ok := d.failoverInputs(st, name)
			if !ok {
				continue
			}
			if in, ok = withView(in); ok {
				ins = append(ins, in)
			}
		}
		r := newRound(ins)
		for _, byDB := range r.byNode {
			for _, ids := range byDB {
				asked += len(ids)
			}
		}
		var leads map[string]int
		for _, in := range ins {
			if leads == nil {
				leads = d.clusterLeads(st, in.Assign.Cluster)
			}
			in.Leads, in.Answers = leads, answers[in.DB]
			changed += len(FailoverOps(st, in, 2, time.Unix(0, 0)))
		}
	}
	b.ReportMetric(float64(changed), "shards-decided")
	b.ReportMetric(float64(asked), "questions")
}

// everyLiveAnswers is a round in which nobody timed out: every live replica
// of each shard of names that needs a leader answers.
func everyLiveAnswers(d *derived, st *statemachine.State, names []string) map[string]map[int]map[string]models.ReplicaTxn {
	answers := map[string]map[int]map[string]models.ReplicaTxn{}
	for _, name := range names {
		in, _ := d.failoverInputs(st, name)
		for sh := range needingLeader(in) {
			if answers[name] == nil {
				answers[name] = map[int]map[string]models.ReplicaTxn{}
			}
			answers[name][sh.ID] = map[string]models.ReplicaTxn{}
			for _, r := range sh.Replicas {
				if _, live := in.Live.Get(r); live {
					answers[name][sh.ID][r] = models.ReplicaTxn{LastTxnID: uint64(100 + sh.ID), LastTerm: 1, Term: 1}
				}
			}
		}
	}
	return answers
}

// BenchmarkDomainFailoverCheck is the failover check of every database
// after a dead domain's leases end at 1,000 nodes x 1,000 databases x 32
// shards, as a pass whose live nodes changed pays it: the live records'
// terms read again (a fresh derived), then each database's inputs and the
// shards that need a leader (withView), ~21,000 of the 32,000 keeping
// theirs.
func BenchmarkDomainFailoverCheck(b *testing.B) {
	const nodes, dbs, shards = 999, 1000, 32
	st := domainState(nodes, dbs, shards, true, 0)
	names := st.Assignments.Keys()
	b.ReportAllocs()
	b.ResetTimer()
	need := 0
	for range b.N {
		var d derived
		need = 0
		for _, name := range names {
			in, ok := d.failoverInputs(st, name)
			if !ok {
				continue
			}
			if in, ok = withView(in); ok {
				need += len(in.view.need)
			}
		}
	}
	b.ReportMetric(float64(need), "shards-to-lead")
}

// BenchmarkScheduleAfterDomainLoss is the rebalance decision of a quiet
// pass after a dead domain at 1,000 nodes x 1,000 databases x 32 shards:
// the membership changed a second ago (nothing to plan or spread before
// the delay), every database's leaders moved (no cluster skipped for its
// last spreading).
func BenchmarkScheduleAfterDomainLoss(b *testing.B) {
	const nodes, dbs, shards = 999, 1000, 32
	st := domainState(nodes, dbs, shards, true, 0)
	st.StorageClusters = map[string]models.StorageCluster{"c": {Name: "c"}}
	confs := map[string]models.Database{}
	for _, db := range st.Assignments.Keys() {
		confs[db] = models.Database{Name: db, StorageCluster: "c", NumShards: shards, ReplicaFactor: 3}
	}
	st.Databases = statemachine.MapOf(confs)
	now := time.Unix(1_000_000, 0)
	in := Input{State: st, Now: now, Delay: 30 * time.Second, SpreadSkip: map[string]bool{},
		Members: map[string]Membership{"c": {Sig: MembershipSig(st, "c"), Since: now.Add(-time.Second), Balanced: MembershipSig(st, "c")}}}
	Schedule(in) // the replica counts read once, as the master's are
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d := Schedule(in); len(d.Spread)+len(d.Plan) > 0 || d.Err != nil {
			b.Fatalf("decided %d moves, %v", len(d.Spread)+len(d.Plan), d.Err)
		}
	}
}

// BenchmarkLedSetDomainLoss is the led set's sync across a whole domain's
// loss at 1,000 nodes x 1,000 databases x 32 shards, every database
// remembered before: what it forgets is what the pass then checks.
func BenchmarkLedSetDomainLoss(b *testing.B) {
	const nodes, dbs, shards = 999, 1000, 32
	before := domainState(nodes, dbs, shards, false, 0)
	after := *before
	for i := 0; i < nodes; i += 3 {
		after.Nodes = statemachine.DeleteIn(after.Nodes, "c", fmt.Sprintf("n%04d", i))
	}
	after.Revisions = map[string]int64{statemachine.ClusterNodesSource("c"): 1}
	names := before.Assignments.Keys()
	b.ReportAllocs()
	forgot := 0
	for range b.N {
		b.StopTimer()
		var l ledSet
		l.sync(before)
		for _, name := range names {
			l.dbs[name] = true
		}
		l.replicasOf(before.Assignments, "c", "") // the index, built at the first loss of this version
		b.StartTimer()
		l.sync(&after)
		forgot = len(l.forgot)
	}
	b.ReportMetric(float64(forgot), "forgotten-dbs")
}
