package master

import (
	"maps"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestLedSetForgetsWhatChanged: an event forgets the databases it touched
// (their states, in-sync sets or the terms a new or changed node record
// holds for their shards, a node assigned one of their replicas joining,
// or a node leading one of their shards leaving or fenced off writes) and
// keeps the others remembered: a follower lost, or a record gone with its
// terms, makes no shard need a leader. A node moving, or a drain, forgets
// them all.
func TestLedSetForgetsWhatChanged(t *testing.T) {
	const c = "c"
	node := func(addr string, seen map[string]int64) models.StorageNode {
		return models.StorageNode{NodeID: "n1", NodeAddress: addr, SeenTerm: seen}
	}
	base := &statemachine.State{
		Assignments: statemachine.MapOf(map[string]models.Assignment{
			"x": {DB: "x", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1", "n2"}}}},
			"y": {DB: "y", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1", "n3"}}}}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{
			"x": {DB: "x", Shards: []models.ShardState{{ID: 0, Leader: "n1", Term: 1, Status: models.StatusOnline}}},
			"y": {DB: "y", Shards: []models.ShardState{{ID: 0, Leader: "n3", Term: 1, Status: models.StatusOnline}}}}),
		Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{c: {
			"n1": node("a:1", map[string]int64{"x/0": 1, "y/0": 1}), "n2": {NodeID: "n2", NodeAddress: "a:2"}}}),
		ISR:       statemachine.NestedMapOf(map[string]map[string]models.ISR{c: {"x/0": {Term: 1}, "y/0": {Term: 1}}}),
		Revisions: map[string]int64{statemachine.SourceAssign: 1, statemachine.SourceShardState: 1, statemachine.SourceDrain: 1},
	}
	next := func(src string, edit func(st *statemachine.State)) *statemachine.State {
		st := *base
		st.Revisions = maps.Clone(base.Revisions)
		st.Revisions[src]++
		edit(&st)
		return &st
	}
	for _, tc := range []struct {
		name   string
		st     *statemachine.State
		forgot []string
	}{
		{"states of y", next(statemachine.SourceShardState, func(st *statemachine.State) {
			st.ShardStates = st.ShardStates.Set("y", models.ShardStates{DB: "y", UID: "u"})
		}), []string{"y"}},
		{"a new database z", next(statemachine.SourceAssign, func(st *statemachine.State) {
			st.Assignments = st.Assignments.Set("z", models.Assignment{DB: "z", Cluster: c})
		}), []string{"z"}},
		{"in-sync set of x", next(statemachine.ClusterISRSource(c), func(st *statemachine.State) {
			st.ISR = statemachine.SetIn(st.ISR, c, "x/0", models.ISR{Term: 2})
		}), []string{"x"}},
		{"seen term of y in a node record", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n1", node("a:1", map[string]int64{"x/0": 1, "y/0": 2}))
		}), []string{"y"}},
		{"a node report that holds no term", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			n := node("a:1", map[string]int64{"x/0": 1, "y/0": 1})
			n.Following = map[string]string{"x/0": "n2"}
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n1", n)
		}), nil},
		{"a follower left", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.DeleteIn(st.Nodes, c, "n2")
		}), nil},
		{"a leader holding terms left", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.DeleteIn(st.Nodes, c, "n1")
		}), []string{"x"}},
		{"a node joined", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n3", models.StorageNode{NodeID: "n3", NodeAddress: "a:3"})
		}), []string{"y"}},
		{"a node moved", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n1", node("a:9", map[string]int64{"x/0": 1, "y/0": 1}))
		}), []string{"x", "y", "z"}},
		{"a node fenced off writes", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			n := node("a:1", map[string]int64{"x/0": 1, "y/0": 1})
			n.DiskFault = &models.DiskFault{Kind: models.DiskFull}
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n1", n)
		}), []string{"x"}},
		{"a follower fenced off writes", next(statemachine.ClusterNodesSource(c), func(st *statemachine.State) {
			st.Nodes = statemachine.SetIn(st.Nodes, c, "n2", models.StorageNode{NodeID: "n2", NodeAddress: "a:2",
				DiskFault: &models.DiskFault{Kind: models.DiskFull}})
		}), nil},
		{"a drain", next(statemachine.SourceDrain, func(*statemachine.State) {}), []string{"x", "y", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ledSet
			l.sync(base)
			for _, db := range []string{"x", "y", "z"} {
				l.dbs[db] = true
			}
			l.sync(tc.st)
			// The trie's diff may also name keys that share a slot with a
			// changed one (its seed is random per process): those may be
			// forgotten too, which only costs a check.
			shared := map[string]bool{}
			statemachine.Changed(base.Assignments, tc.st.Assignments, func(db string) { shared[db] = true })
			statemachine.Changed(base.ShardStates, tc.st.ShardStates, func(db string) { shared[db] = true })
			statemachine.Changed(base.ISR.At(c), tc.st.ISR.At(c), func(id string) {
				if db, _, err := models.ParseShardID(id); err == nil {
					shared[db] = true
				}
			})
			for _, db := range []string{"x", "y", "z"} {
				switch {
				case containsStr(tc.forgot, db):
					require.False(t, l.dbs[db], "%s forgotten", db)
				case !shared[db]:
					require.True(t, l.dbs[db], "%s remembered", db)
				}
			}
		})
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
