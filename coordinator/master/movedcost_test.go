package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestMovesObserveCostsWhatChanged: a publication that rewrites one node
// record (its report) costs Observe about the same with 10,000 live nodes
// as with 100, where it compared every live node's address on each one (a
// master candidate observes every publication, and node reports are most
// of them while databases are placed).
func TestMovesObserveCostsWhatChanged(t *testing.T) {
	perPublication := func(n int) time.Duration {
		nodes := map[string]models.StorageNode{}
		for i := range n {
			id := fmt.Sprintf("n%05d", i)
			nodes[id] = models.StorageNode{NodeID: id, NodeAddress: id}
		}
		st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": nodes}),
			Synced: map[string]bool{statemachine.ClusterNodesSource("c"): true}}
		mv := NewMoves()
		mv.Observe(st)
		best := time.Hour
		for i := range 50 {
			next := *st
			next.Nodes = statemachine.SetIn(next.Nodes, "c", "n00001", models.StorageNode{NodeID: "n00001", NodeAddress: "n00001", LastUpdated: int64(i)})
			st = &next
			began := time.Now()
			require.Empty(t, mv.Observe(st))
			best = min(best, time.Since(began))
		}
		next := *st
		next.Nodes = statemachine.SetIn(next.Nodes, "c", "n00002", models.StorageNode{NodeID: "n00002", NodeAddress: "elsewhere"})
		require.Equal(t, map[string][]string{"c": {"n00002"}}, mv.Observe(&next), "a move is still seen")
		return best
	}
	small, large := perPublication(100), perPublication(10000)
	t.Logf("a publication rewriting one node record: %v at 100 nodes, %v at 10,000", small, large)
	require.Less(t, large, 10*max(small, 10*time.Microsecond), "a publication's cost grows with the cluster")
}
