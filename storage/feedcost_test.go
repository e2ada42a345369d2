package storage

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestFeedStepCostsWhatChanged: a snapshot that changes one database and
// one node record makes the feed look at those (and the few the trie keeps
// beside them), where it looked at every database and every node record on
// each snapshot, 20,000 here (the agents of a simulated cluster share one feed:
// placing a database cost it O(cluster)).
func TestFeedStepCostsWhatChanged(t *testing.T) {
	perStep := func(n int) int {
		assign, states := map[string]models.Assignment{}, map[string]models.ShardStates{}
		nodes := map[string]models.StorageNode{}
		for i := range n {
			db, id := fmt.Sprintf("db%05d", i), fmt.Sprintf("n%05d", i)
			assign[db] = models.Assignment{DB: db, Cluster: "c", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{id}}}}
			states[db] = models.ShardStates{DB: db, Shards: []models.ShardState{{ID: 0, Leader: id, Term: 1, Status: models.StatusOnline}}}
			nodes[id] = models.StorageNode{NodeID: id, NodeAddress: id}
		}
		cur := &statemachine.State{Assignments: statemachine.MapOf(assign), ShardStates: statemachine.MapOf(states),
			Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": nodes})}
		f := NewFeed(func() *statemachine.State { return cur }, nil)
		sub := f.subscribe("n00000")
		f.step()
		before := f.looked
		for term := range 50 {
			next := *cur
			next.ShardStates = next.ShardStates.Set("db00000", models.ShardStates{DB: "db00000",
				Shards: []models.ShardState{{ID: 0, Leader: "n00000", Term: int64(term + 2), Status: models.StatusOnline}}})
			next.Nodes = statemachine.SetIn(next.Nodes, "c", "n00001", models.StorageNode{NodeID: "n00001", NodeAddress: "n00001", LastUpdated: int64(term)})
			cur = &next
			f.step()
			_, names := sub.take()
			require.True(t, names["db00000"], "the host of the changed database is told")
		}
		return (f.looked - before) / 50
	}
	// The trie's diff may name a few entries sharing a slot with the
	// changed ones; every database and node record is 20,000.
	small, large := perStep(100), perStep(10000)
	t.Logf("a snapshot changing one database and one node record: %d looked at with 100, %d with 10,000", small, large)
	require.Less(t, large, 32, "a snapshot's cost grows with the cluster")
}
