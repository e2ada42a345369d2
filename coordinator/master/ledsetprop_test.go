package master

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestLedSetNeverHidesANeed: over random runs of nodes lost, returning,
// fenced off writes and taking them again, records' terms rising, leaders
// published and in-sync sets rewritten, a database the led set remembers
// (kept as the master keeps it: remembered when its check finds no shard
// needing a leader) never has a shard that needs one.
func TestLedSetNeverHidesANeed(t *testing.T) {
	const c = "c"
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		nodeIDs := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
		assigns := map[string]models.Assignment{}
		states := map[string]models.ShardStates{}
		isr := map[string]models.ISR{}
		for d := range 8 {
			db := fmt.Sprintf("d%d", d)
			a := models.Assignment{DB: db, Cluster: c}
			ss := models.ShardStates{DB: db}
			for s := range 4 {
				reps := slices.Clone(nodeIDs)
				rng.Shuffle(len(reps), func(i, j int) { reps[i], reps[j] = reps[j], reps[i] })
				reps = reps[:3]
				a.Shards = append(a.Shards, models.ShardAssignment{ID: s, Replicas: reps})
				ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: reps[0], Term: 1, Status: models.StatusOnline})
				isr[models.ShardID(db, s)] = models.ISR{Leader: reps[0], Term: 1, Replicas: reps}
			}
			assigns[db], states[db] = a, ss
		}
		record := func(id string) models.StorageNode {
			n := models.StorageNode{NodeID: id, NodeAddress: id + ":1", MaxTerm: map[string]int64{}}
			for db, a := range assigns {
				for _, sh := range a.Shards {
					if slices.Contains(sh.Replicas, id) {
						n.MaxTerm[models.ShardID(db, sh.ID)] = 1
					}
				}
			}
			return n
		}
		live := map[string]models.StorageNode{}
		for _, id := range nodeIDs {
			live[id] = record(id)
		}
		st := &statemachine.State{
			Assignments: statemachine.MapOf(assigns),
			ShardStates: statemachine.MapOf(states),
			Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{c: live}),
			ISR:         statemachine.NestedMapOf(map[string]map[string]models.ISR{c: isr}),
			Synced:      map[string]bool{statemachine.ClusterNodesSource(c): true, statemachine.ClusterISRSource(c): true},
			Revisions: map[string]int64{statemachine.SourceAssign: 1, statemachine.SourceShardState: 1,
				statemachine.ClusterNodesSource(c): 1, statemachine.ClusterISRSource(c): 1},
		}
		needs := func(st *statemachine.State, db string) []string {
			var d derived
			in, ok := d.failoverInputs(st, db)
			require.True(t, ok)
			var out []string
			for _, n := range needsOf(in) {
				out = append(out, n.id)
			}
			return out
		}
		var l ledSet
		check := func(step string) {
			l.sync(st)
			for _, db := range slices.Sorted(maps.Keys(assigns)) {
				need := needs(st, db)
				if l.dbs[db] {
					require.Empty(t, need, "seed %d, after %s: %s is remembered led, but these shards need a leader", seed, step, db)
				} else if len(need) == 0 {
					l.dbs[db] = true
				}
			}
		}
		check("the start")
		bump := func(src string) {
			st2 := *st
			st2.Revisions = maps.Clone(st.Revisions)
			st2.Revisions[src]++
			st = &st2
		}
		for step := range 200 {
			id := nodeIDs[rng.IntN(len(nodeIDs))]
			db := fmt.Sprintf("d%d", rng.IntN(8))
			shard := rng.IntN(4)
			sid := models.ShardID(db, shard)
			nodes := st.Nodes.At(c)
			cur, isLive := nodes.Get(id)
			var what string
			switch rng.IntN(6) {
			case 0: // a node lost, or back
				bump(statemachine.ClusterNodesSource(c))
				if isLive {
					st.Nodes = statemachine.DeleteIn(st.Nodes, c, id)
					what = id + " lost"
				} else {
					st.Nodes = statemachine.SetIn(st.Nodes, c, id, record(id))
					what = id + " back"
				}
			case 1: // fenced off writes, or taking them again
				if !isLive {
					continue
				}
				bump(statemachine.ClusterNodesSource(c))
				n := cur
				if n.Writable() {
					n.DiskFault = &models.DiskFault{Kind: models.DiskFull}
					what = id + " fenced"
				} else {
					n.DiskFault = nil
					what = id + " writable again"
				}
				st.Nodes = statemachine.SetIn(st.Nodes, c, id, n)
			case 2: // a record's term for a shard it holds rises
				if !isLive || cur.MaxTerm[sid] == 0 {
					continue
				}
				bump(statemachine.ClusterNodesSource(c))
				n := cur
				n.MaxTerm = maps.Clone(n.MaxTerm)
				n.MaxTerm[sid] = st.ShardStates.At(db).Shards[shard].Term + int64(rng.IntN(2))
				st.Nodes = statemachine.SetIn(st.Nodes, c, id, n)
				what = fmt.Sprintf("%s holds %s at term %d", id, sid, n.MaxTerm[sid])
			case 3, 4: // a new leader published: a live replica, or any
				bump(statemachine.SourceShardState)
				a := st.Assignments.At(db)
				reps := a.Shards[shard].Replicas
				leader := reps[rng.IntN(len(reps))]
				ss := st.ShardStates.At(db)
				ss.Shards = slices.Clone(ss.Shards)
				s := ss.Shards[shard]
				s.Leader, s.Term = leader, s.Term+1
				ss.Shards[shard] = s
				st.ShardStates = st.ShardStates.Set(db, ss)
				what = fmt.Sprintf("%s led by %s at term %d", sid, leader, s.Term)
			case 5: // the in-sync set rewritten at the shard's term
				bump(statemachine.ClusterISRSource(c))
				s := st.ShardStates.At(db).Shards[shard]
				reps := st.Assignments.At(db).Shards[shard].Replicas
				st.ISR = statemachine.SetIn(st.ISR, c, sid, models.ISR{Leader: s.Leader, Term: s.Term, Replicas: reps[:1+rng.IntN(len(reps))]})
				what = "the set of " + sid + " rewritten"
			}
			check(fmt.Sprintf("step %d (%s)", step, what))
		}
	}
}
