package master_test

import (
	"testing"

	"github.com/cairn-db/cairn/master"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

func live(txn map[string]uint64) map[string]models.StorageNode {
	out := map[string]models.StorageNode{}
	for id := range txn {
		out[id] = models.StorageNode{NodeID: id}
	}
	return out
}

// liveAt is live nodes with a last_txn_id and a max_term (log term) for db/0.
func liveAt(logs map[string][2]int64) map[string]models.StorageNode {
	out := map[string]models.StorageNode{}
	for id, l := range logs {
		out[id] = models.StorageNode{NodeID: id, LastTxnID: map[string]uint64{"db/0": uint64(l[0])}, MaxTerm: map[string]int64{"db/0": l[1]}}
	}
	return out
}

// answers are the replicas' answers about shard 0 at failover.
func answers(txn map[string]uint64) map[int]map[string]models.ReplicaTxn {
	out := map[string]models.ReplicaTxn{}
	for id, t := range txn {
		out[id] = models.ReplicaTxn{LastTxnID: t}
	}
	return map[int]map[string]models.ReplicaTxn{0: out}
}

func TestPlanLeaders(t *testing.T) {
	abc := models.Assignment{DB: "db", Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b", "c"}}}}
	online := func(leader string, term int64) models.ShardStates {
		return models.ShardStates{DB: "db", Shards: []models.ShardState{{ID: 0, Leader: leader, Term: term, Status: models.StatusOnline}}}
	}
	offline := models.ShardStates{DB: "db", Shards: []models.ShardState{{ID: 0, Leader: "a", Term: 4, Status: models.StatusOffline, Reason: "no live in-sync replica; last in-sync set [a b]"}}}
	tests := []struct {
		name    string
		in      master.ShardInputs
		leader  string
		term    int64
		status  string
		changed bool
		reason  string
	}{
		{name: "leader alive: unchanged",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"a": 1, "b": 9, "c": 9}), Answers: answers(map[string]uint64{"a": 1, "b": 9, "c": 9})},
			leader: "a", term: 3, status: models.StatusOnline},
		{name: "leader dead: highest last_txn_id live replica, term+1",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}), Answers: answers(map[string]uint64{"b": 5, "c": 9})},
			leader: "c", term: 4, status: models.StatusOnline, changed: true},
		{name: "leader dead: highest last_txn_id among the in-sync set only",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}), Answers: answers(map[string]uint64{"b": 5, "c": 9}),
				ISR: map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b"}}}},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "tie on last_txn_id: node id decides",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"c": 7, "b": 7}), Answers: answers(map[string]uint64{"c": 7, "b": 7})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "no live in-sync member: offline with reason",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"c": 9}), Answers: answers(map[string]uint64{"c": 9}),
				ISR: map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b"}}}},
			leader: "a", term: 3, status: models.StatusOffline, changed: true},
		{name: "offline shard, last in-sync member returns: online with it, term+1",
			in: master.ShardInputs{Assign: abc, States: offline, Live: live(map[string]uint64{"b": 2, "c": 9}), Answers: answers(map[string]uint64{"b": 2, "c": 9}),
				ISR: map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}}},
			leader: "b", term: 5, status: models.StatusOnline, changed: true},
		{name: "offline shard, returning node not in last in-sync set: stays offline",
			in: master.ShardInputs{Assign: abc, States: offline, Live: live(map[string]uint64{"c": 9}), Answers: answers(map[string]uint64{"c": 9}),
				ISR: map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}}},
			leader: "a", term: 4, status: models.StatusOffline},
		{name: "draining node not preferred even with the highest last_txn_id",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 1, "c": 9}), Answers: answers(map[string]uint64{"b": 1, "c": 9}),
				Drains: map[string]models.Drain{"c": {NodeID: "c"}}},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "draining node leads when nothing else can",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"c": 9}), Answers: answers(map[string]uint64{"c": 9}),
				Drains: map[string]models.Drain{"c": {NodeID: "c"}}},
			leader: "c", term: 4, status: models.StatusOnline, changed: true},
		{name: "leader no longer a replica: re-elected",
			in: master.ShardInputs{Assign: models.Assignment{DB: "db", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"b", "c"}}}},
				States: online("a", 3), Live: live(map[string]uint64{"a": 9, "b": 1, "c": 2}), Answers: answers(map[string]uint64{"a": 9, "b": 1, "c": 2})},
			leader: "c", term: 4, status: models.StatusOnline, changed: true},
		{name: "leader alive at the term its replicas' logs hold: unchanged",
			in:     master.ShardInputs{Assign: abc, States: online("a", 2), Live: liveAt(map[string][2]int64{"a": {9, 2}, "b": {9, 2}, "c": {8, 1}})},
			leader: "a", term: 2, status: models.StatusOnline},
		{name: "restored state below the replicas' log terms: re-elected above them",
			in:     master.ShardInputs{Assign: abc, States: online("a", 1), Live: liveAt(map[string][2]int64{"a": {10, 2}, "b": {12, 2}, "c": {12, 2}})},
			leader: "b", term: 3, status: models.StatusOnline, changed: true},
		{name: "restored state, leader holds the newest log: same leader, new term",
			in:     master.ShardInputs{Assign: abc, States: online("a", 1), Live: liveAt(map[string][2]int64{"a": {12, 4}, "b": {12, 2}})},
			leader: "a", term: 5, status: models.StatusOnline, changed: true},
		{name: "a newer term's log beats a longer tail from an older term",
			in:     master.ShardInputs{Assign: abc, States: online("a", 2), Live: liveAt(map[string][2]int64{"b": {20, 1}, "c": {15, 2}})},
			leader: "c", term: 3, status: models.StatusOnline, changed: true},
		{name: "offline shard returns above the terms its replicas hold",
			in: master.ShardInputs{Assign: abc, States: offline, Live: liveAt(map[string][2]int64{"b": {3, 7}}),
				ISR: map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}}},
			leader: "b", term: 8, status: models.StatusOnline, changed: true},
		{name: "a replica that does not answer is skipped, even with more data",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}),
				Answers: answers(map[string]uint64{"b": 5})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true, reason: "c=no answer"},
		{name: "nobody answered: the tie-break among live in-sync replicas",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}),
				Answers: map[int]map[string]models.ReplicaTxn{0: {}}},
			leader: "b", term: 4, status: models.StatusOnline, changed: true, reason: "none answered"},
		{name: "shard without a published state gets a leader at term 1",
			in:     master.ShardInputs{Assign: abc, States: models.ShardStates{DB: "db"}, Live: live(map[string]uint64{"a": 1, "b": 1, "c": 1}), Answers: answers(map[string]uint64{"a": 1, "b": 1, "c": 1})},
			leader: "a", term: 1, status: models.StatusOnline, changed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.DB = "db"
			next, changed := master.PlanLeaders(tc.in)
			require.Len(t, next.Shards, 1)
			s := next.Shards[0]
			require.Equal(t, tc.leader, s.Leader)
			require.Equal(t, tc.term, s.Term)
			require.Equal(t, tc.status, s.Status)
			if tc.changed {
				require.Equal(t, []int{0}, changed)
			} else {
				require.Empty(t, changed)
			}
			if s.Status == models.StatusOffline {
				require.Contains(t, s.Reason, "no live in-sync replica")
			}
			if tc.reason != "" {
				require.Contains(t, s.Reason, tc.reason)
			}
			if tc.changed && s.Status == models.StatusOnline && tc.in.Answers != nil && len(tc.in.Answers[0]) > 0 {
				require.Contains(t, s.Reason, "leader "+tc.leader+" (highest last_txn_id", "the choice and the answers are in the reason")
			}
		})
	}
}

// A tie on last_txn_id goes to the candidate leading fewer shards, so a dead
// node's leaderships spread out instead of piling on one survivor.
func TestPlanLeadersTieSpreadsLeadership(t *testing.T) {
	in := master.ShardInputs{DB: "db",
		Assign: models.Assignment{DB: "db", Shards: []models.ShardAssignment{
			{ID: 0, Replicas: []string{"a", "b", "c"}}, {ID: 1, Replicas: []string{"a", "b", "c"}},
			{ID: 2, Replicas: []string{"a", "b", "c"}}, {ID: 3, Replicas: []string{"a", "b", "c"}}}},
		States: models.ShardStates{DB: "db", Shards: []models.ShardState{
			{ID: 0, Leader: "a", Term: 1, Status: models.StatusOnline}, {ID: 1, Leader: "a", Term: 1, Status: models.StatusOnline},
			{ID: 2, Leader: "a", Term: 1, Status: models.StatusOnline}, {ID: 3, Leader: "b", Term: 1, Status: models.StatusOnline}}},
		Live: map[string]models.StorageNode{"b": {NodeID: "b"}, "c": {NodeID: "c"}},
	}
	next, changed := master.PlanLeaders(in)
	require.Equal(t, []int{0, 1, 2}, changed)
	leads := map[string]int{}
	for _, s := range next.Shards {
		require.Equal(t, models.StatusOnline, s.Status)
		leads[s.Leader]++
	}
	require.Equal(t, map[string]int{"b": 2, "c": 2}, leads)
	// Deterministic: the same inputs give the same plan.
	again, _ := master.PlanLeaders(in)
	require.Equal(t, next, again)
}
