package master

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The failover check's terms computed once per version of a cluster's live
// nodes (liveTerms, by database and shard number) give every shard the same
// live and recorded terms as reading every live node's record for it, and
// as the maps by id (RecordedTerms, SeenTerms), ids that are not a plain
// ShardID included (a leading zero, a sign, a number past termSlots, no
// slash); and they follow the live nodes: a record that changes, a node
// that goes (lowering a shard's highest term) or comes is read from the
// new version, never from the terms of the last.
func TestCachedTermsSameAsPerShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dbs := []string{"d", "e", "a/b", ""}
	shards := []int{0, 1, 2, 3, 7, 9, 10, 99, 4095, 4096, 5000, 12345, -1}
	odd := []string{"d/007", "d/+3", "d/-1", "d/", "d", "e/00", "e/1x", "/3", "d/99999"}
	record := func(i int) models.StorageNode {
		n := models.StorageNode{NodeID: fmt.Sprintf("n%d", i), MaxTerm: map[string]int64{}, SeenTerm: map[string]int64{}}
		for _, db := range dbs {
			for _, s := range shards {
				id := models.ShardID(db, s)
				if rng.IntN(3) == 0 {
					n.MaxTerm[id] = rng.Int64N(10)
				}
				if rng.IntN(3) == 0 {
					n.SeenTerm[id] = rng.Int64N(12)
				}
			}
		}
		for _, id := range odd {
			if rng.IntN(2) == 0 {
				n.MaxTerm[id] = rng.Int64N(10)
			}
			if rng.IntN(2) == 0 {
				n.SeenTerm[id] = rng.Int64N(12)
			}
		}
		return n
	}
	nodes := map[string]models.StorageNode{}
	for i := range 20 {
		n := record(i)
		nodes[n.NodeID] = n
	}
	live := statemachine.MapOf(nodes)
	var d derived
	for step := range 40 {
		switch step % 4 {
		case 1: // a node goes
			live = live.Delete(live.Keys()[rng.IntN(live.Len())])
		case 2: // a record changes
			n := record(rng.IntN(30))
			live = live.Set(n.NodeID, n)
		case 3: // a node comes
			n := record(100 + step)
			live = live.Set(n.NodeID, n)
		}
		lt := d.liveTerms(live, "c")
		for _, db := range dbs {
			cached := ShardInputs{DB: db, Live: live, terms: lt.forDB(db)}
			maps := ShardInputs{DB: db, Live: live, RecordedTerms: RecordedTerms(live), SeenTerms: SeenTerms(live)}
			plain := ShardInputs{DB: db, Live: live}
			for _, s := range shards {
				id := models.ShardID(db, s)
				require.Equal(t, liveTerm(plain, s), liveTerm(cached, s), "step %d shard %q", step, id)
				require.Equal(t, liveTerm(plain, s), liveTerm(maps, s), "step %d shard %q", step, id)
				require.Equal(t, recordedTermOf(plain, s, id), recordedTermOf(cached, s, id), "step %d shard %q", step, id)
			}
		}
		for _, id := range odd {
			got := lt.none.of(-1, id) // an id that is no ShardID of a number below termSlots is read by its id
			want := shardTerm{}
			for _, n := range live.All() {
				want = raise(raise(want, n.MaxTerm[id], true), n.SeenTerm[id], false)
			}
			if _, _, ok := termSlot(id); !ok {
				require.Equal(t, want, got, "step %d id %q", step, id)
			}
		}
	}
}

// The restored in-sync sets kept per version of a cluster's sets
// (ShardInputs.Restored) follow every change of the sets, as a lookup of
// each would (restoredISR), and a set handed out is never changed after:
// a pass's inputs keep what they were given.
func TestRestoredSetsFollowTheInSyncSets(t *testing.T) {
	const c, here, other = "c", 7, 9
	rng := rand.New(rand.NewPCG(3, 4))
	sets := map[string]models.ISR{}
	for s := range 64 {
		sets[models.ShardID("d", s)] = models.ISR{Term: 1, ClusterID: here}
	}
	st := &statemachine.State{
		Assignments: statemachine.MapOf(map[string]models.Assignment{"d": {DB: "d", Cluster: c}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"d": {DB: "d"}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{c: {}}),
		ISR:         statemachine.NestedMapOf(map[string]map[string]models.ISR{c: sets}),
		Synced:      map[string]bool{statemachine.ClusterNodesSource(c): true, statemachine.ClusterISRSource(c): true},
		ListedFrom:  map[string]uint64{statemachine.ClusterISRSource(c): here},
	}
	var d derived
	var handed []map[string]bool
	var want []map[string]bool
	for step := range 200 {
		for range rng.IntN(4) + 1 {
			id := models.ShardID("d", rng.IntN(72))
			switch rng.IntN(4) {
			case 0:
				st.ISR = statemachine.DeleteIn(st.ISR, c, id)
			case 1:
				st.ISR = statemachine.SetIn(st.ISR, c, id, models.ISR{Term: 2, ClusterID: other})
			case 2:
				st.ISR = statemachine.SetIn(st.ISR, c, id, models.ISR{Term: 2}) // an older writer: no id
			default:
				st.ISR = statemachine.SetIn(st.ISR, c, id, models.ISR{Term: 2, ClusterID: here})
			}
		}
		if step == 150 { // the etcd was replaced: every set is judged again
			st.ListedFrom = map[string]uint64{statemachine.ClusterISRSource(c): other}
		}
		in, ok := d.failoverInputs(st, "d")
		require.True(t, ok)
		require.NotNil(t, in.Restored)
		plain := in
		plain.Restored = nil
		exp := map[string]bool{}
		for s := range 72 {
			id := models.ShardID("d", s)
			r := restoredISR(plain, models.ShardAssignment{ID: s})
			require.Equal(t, r, restoredISR(in, models.ShardAssignment{ID: s}), "step %d shard %s", step, id)
			if r {
				exp[id] = true
			}
		}
		require.Equal(t, exp, in.Restored, "step %d", step)
		handed, want = append(handed, in.Restored), append(want, exp)
	}
	for i := range handed {
		require.Equal(t, want[i], handed[i], "inputs of step %d changed after", i)
	}
}

// A pass's inputs read the records' terms of the live nodes they hold, not
// the last pass's: between two passes a live replica's record shows a
// term above a shard's published one (a restored state), and the shard,
// led by a live replica at the first pass, needs a leader at a term above
// it at the next; then that replica goes, and the shard's term is its
// published one again, so it keeps its leader.
func TestFailoverInputsReadTheNewTerms(t *testing.T) {
	st := domainState(30, 4, 8, true, 0)
	var d derived
	const db = "db0001"
	in, ok := d.failoverInputs(st, db)
	require.True(t, ok)
	in, ok = withView(in)
	require.True(t, ok)
	var kept models.ShardAssignment
	var leader string
	for i, sh := range in.Assign.Shards {
		if !containsNeed(in.view.need, i) {
			kept = sh
			leader = in.States.Shards[i].Leader
			break
		}
	}
	require.NotEmpty(t, leader, "a shard keeps its leader")
	id := models.ShardID(db, kept.ID)
	var other string // a live replica that does not lead it
	for _, r := range kept.Replicas {
		if _, live := in.Live.Get(r); live && r != leader {
			other = r
		}
	}
	require.NotEmpty(t, other) // (domainState: a shard's id is its index)

	rec := st.Nodes.At("c").At(other)
	rec.MaxTerm = maps.Clone(rec.MaxTerm)
	rec.MaxTerm[id] = 5
	st.Nodes = statemachine.SetIn(st.Nodes, "c", other, rec)
	in, ok = d.failoverInputs(st, db)
	require.True(t, ok)
	in, ok = withView(in)
	require.True(t, ok)
	require.True(t, containsNeed(in.view.need, kept.ID), "%s: behind a live record's term", id)
	require.Equal(t, int64(6), NextTerm(in, in.States.Shards[kept.ID]))

	st.Nodes = statemachine.DeleteIn(st.Nodes, "c", other)
	in, ok = d.failoverInputs(st, db)
	require.True(t, ok)
	in, _ = withView(in)
	require.False(t, in.view != nil && containsNeed(in.view.need, kept.ID), "%s: the record that was ahead is gone", id)
	require.Equal(t, int64(2), NextTerm(in, in.States.Shards[kept.ID]))
}
