package master_test

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// NextTerm is above the published term, every term in a live replica's log,
// every term a live replica accepted (seen_term, from its record or its
// answer), and what a replica answers it serves at.
func TestNextTermAboveSeenTerms(t *testing.T) {
	cur := models.ShardState{ID: 0, Leader: "a", Term: 3, Status: models.StatusOnline}
	node := func(id string, maxTerm, seen int64) models.StorageNode {
		return models.StorageNode{NodeID: id, MaxTerm: map[string]int64{"db/0": maxTerm}, SeenTerm: map[string]int64{"db/0": seen}}
	}
	tests := []struct {
		name string
		in   master.ShardInputs
		want int64
	}{
		{"nothing live: published term + 1", master.ShardInputs{DB: "db"}, 4},
		{"logs below the published term", master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": node("a", 2, 3)})}, 4},
		{"a log above the published term (restored state)", master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": node("a", 6, 6)})}, 7},
		{"a leadership that wrote nothing: its term only in seen_term",
			master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": node("a", 3, 3), "b": node("b", 3, 8)})}, 9},
		{"seen term of another shard does not count",
			master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": {NodeID: "a", SeenTerm: map[string]int64{"db/1": 50, "other/0": 60}}})}, 4},
		{"seen term from the failover answer only (record not yet rewritten)",
			master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": node("a", 3, 3)}),
				Answers: map[int]map[string]models.ReplicaTxn{0: {"a": {LastTxnID: 9, LastTerm: 3, Term: 3, SeenTerm: 11}}}}, 12},
		{"a dead node's seen term is unknown: not counted",
			master.ShardInputs{DB: "db", Live: statemachine.MapOf(map[string]models.StorageNode{"a": node("a", 3, 3)})}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, master.NextTerm(tc.in, cur))
		})
	}
}

// A restored state names term 1 for a shard whose replicas accepted term 2
// (a leadership that wrote nothing, so every log still ends at term 1): the
// shard gets a new leader at term 3, never term 2 again.
func TestPlanLeadersRaisesAboveSeenTerm(t *testing.T) {
	abc := models.Assignment{DB: "db", Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b", "c"}}}}
	states := models.ShardStates{DB: "db", Shards: []models.ShardState{{ID: 0, Leader: "a", Term: 1, Status: models.StatusOnline}}}
	liveNodes := map[string]models.StorageNode{}
	for _, id := range []string{"a", "b", "c"} {
		liveNodes[id] = models.StorageNode{NodeID: id, MaxTerm: map[string]int64{"db/0": 1}, SeenTerm: map[string]int64{"db/0": 2}}
	}
	next, changed := master.PlanLeaders(master.ShardInputs{DB: "db", Assign: abc, States: states, Live: statemachine.MapOf(liveNodes)})
	require.Equal(t, []int{0}, changed)
	require.Equal(t, int64(3), next.Shards[0].Term)
	require.Equal(t, models.StatusOnline, next.Shards[0].Status)

	// At the seen term already: nothing to do.
	states.Shards[0].Term = 2
	_, changed = master.PlanLeaders(master.ShardInputs{DB: "db", Assign: abc, States: states, Live: statemachine.MapOf(liveNodes)})
	require.Empty(t, changed)
}

// A replica that moved (its node id registered again at another address)
// makes each online shard it holds get a new leadership at a higher term,
// the leader by the usual rule (the best log among live in-sync replicas);
// shards it does not hold stay.
func TestPlanLeadersRepublishesShardsOfMovedNode(t *testing.T) {
	a := models.Assignment{DB: "db", Cluster: cluster, Shards: []models.ShardAssignment{
		{ID: 0, Replicas: []string{"a", "b", "c"}}, {ID: 1, Replicas: []string{"b", "c", "d"}}}}
	states := models.ShardStates{DB: "db", Shards: []models.ShardState{
		{ID: 0, Leader: "a", Term: 4, Status: models.StatusOnline}, {ID: 1, Leader: "b", Term: 2, Status: models.StatusOnline}}}
	liveNodes := live(map[string]uint64{"a": 0, "b": 0, "c": 0, "d": 0})
	ans := map[int]map[string]models.ReplicaTxn{0: {"a": {LastTxnID: 5, LastTerm: 4}, "b": {LastTxnID: 9, LastTerm: 4}, "c": {LastTxnID: 7, LastTerm: 4}}}
	next, changed := master.PlanLeaders(master.ShardInputs{DB: "db", Assign: a, States: states, Live: liveNodes,
		Answers: ans, Moved: map[string]bool{"a": true}})
	require.Equal(t, []int{0}, changed)
	require.Equal(t, models.ShardState{ID: 0, Leader: "b", Term: 5, Status: models.StatusOnline, Reason: next.Shards[0].Reason}, next.Shards[0],
		"the best log among the live in-sync replicas leads, one term up")
	require.Equal(t, states.Shards[1], next.Shards[1])
}
