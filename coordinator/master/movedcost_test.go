package master

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestMovesObserveCostsWhatChanged: a publication that rewrites one node
// record (its report) makes Observe look at that record (and the few the
// trie keeps beside it), where it compared every live node's address on
// each one, 10,000 here (a master candidate observes every publication,
// and node reports are most of them while databases are placed). Counted,
// not timed.
func TestMovesObserveCostsWhatChanged(t *testing.T) {
	perPublication := func(n int) int {
		nodes := map[string]models.StorageNode{}
		for i := range n {
			id := fmt.Sprintf("n%05d", i)
			nodes[id] = models.StorageNode{NodeID: id, NodeAddress: id}
		}
		st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": nodes}),
			Synced: map[string]bool{statemachine.ClusterNodesSource("c"): true}}
		mv := NewMoves()
		mv.Observe(st)
		before := mv.looked
		for i := range 50 {
			next := *st
			next.Nodes = statemachine.SetIn(next.Nodes, "c", "n00001", models.StorageNode{NodeID: "n00001", NodeAddress: "n00001", LastUpdated: int64(i)})
			st = &next
			require.Empty(t, mv.Observe(st))
		}
		looked := (mv.looked - before) / 50
		next := *st
		next.Nodes = statemachine.SetIn(next.Nodes, "c", "n00002", models.StorageNode{NodeID: "n00002", NodeAddress: "elsewhere"})
		require.Equal(t, map[string][]string{"c": {"n00002"}}, mv.Observe(&next), "a move is still seen")
		return looked
	}
	// The trie's diff may name a few records sharing a slot with the
	// changed one; every live node is 10,000.
	small, large := perPublication(100), perPublication(10000)
	t.Logf("a publication rewriting one node record: %d records looked at with 100 nodes, %d with 10,000", small, large)
	require.Less(t, large, 32, "a publication's cost grows with the cluster")
}
