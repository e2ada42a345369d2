package master

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The failover check's terms computed once per cluster (RecordedTerms,
// SeenTerms) give every shard the same live term as reading every live
// node's record for it.
func TestCachedTermsSameAsPerShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := map[string]models.StorageNode{}
	for i := range 20 {
		n := models.StorageNode{NodeID: fmt.Sprintf("n%d", i), MaxTerm: map[string]int64{}, SeenTerm: map[string]int64{}}
		for s := range 8 {
			id := models.ShardID("d", s)
			if rng.IntN(3) == 0 {
				n.MaxTerm[id] = rng.Int64N(10)
			}
			if rng.IntN(3) == 0 {
				n.SeenTerm[id] = rng.Int64N(12)
			}
		}
		nodes[n.NodeID] = n
	}
	live := statemachine.MapOf(nodes)
	var d derived
	recorded := d.recordedTerms(live, "c")
	cached := ShardInputs{DB: "d", Live: live, RecordedTerms: recorded, SeenTerms: d.seen}
	require.NotNil(t, cached.SeenTerms)
	plain := ShardInputs{DB: "d", Live: live}
	for s := range 8 {
		require.Equal(t, liveTerm(plain, s), liveTerm(cached, s), "shard %d", s)
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
