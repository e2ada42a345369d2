package master_test

import (
	"strings"
	"testing"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func live(txn map[string]uint64) statemachine.Map[models.StorageNode] {
	out := map[string]models.StorageNode{}
	for id := range txn {
		out[id] = models.StorageNode{NodeID: id}
	}
	return statemachine.MapOf(out)
}

// liveAt is live nodes with a last_txn_id and a max_term (log term) for db/0.
func liveAt(logs map[string][2]int64) statemachine.Map[models.StorageNode] {
	out := map[string]models.StorageNode{}
	for id, l := range logs {
		out[id] = models.StorageNode{NodeID: id, LastTxnID: map[string]uint64{"db/0": uint64(l[0])}, MaxTerm: map[string]int64{"db/0": l[1]}}
	}
	return statemachine.MapOf(out)
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
		reason  string // a part of the shard's reason
	}{
		{name: "leader alive: unchanged",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"a": 1, "b": 9, "c": 9}), Answers: answers(map[string]uint64{"a": 1, "b": 9, "c": 9})},
			leader: "a", term: 3, status: models.StatusOnline},
		{name: "leader dead: highest last_txn_id live replica, term+1",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}), Answers: answers(map[string]uint64{"b": 5, "c": 9})},
			leader: "c", term: 4, status: models.StatusOnline, changed: true},
		{name: "leader dead: highest last_txn_id among the in-sync set only",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}), Answers: answers(map[string]uint64{"b": 5, "c": 9}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b"}}})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "tie on last_txn_id: node id decides",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"c": 7, "b": 7}), Answers: answers(map[string]uint64{"c": 7, "b": 7})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "no live in-sync member: offline with reason",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"c": 9}), Answers: answers(map[string]uint64{"c": 9}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b"}}})},
			leader: "a", term: 3, status: models.StatusOffline, changed: true},
		{name: "offline shard, last in-sync member returns: online with it, term+1",
			in: master.ShardInputs{Assign: abc, States: offline, Live: live(map[string]uint64{"b": 2, "c": 9}), Answers: answers(map[string]uint64{"b": 2, "c": 9}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}})},
			leader: "b", term: 5, status: models.StatusOnline, changed: true},
		{name: "offline shard, returning node not in last in-sync set: stays offline",
			in: master.ShardInputs{Assign: abc, States: offline, Live: live(map[string]uint64{"c": 9}), Answers: answers(map[string]uint64{"c": 9}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}})},
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
			in:     master.ShardInputs{Assign: abc, States: online("a", 1), Live: liveAt(map[string][2]int64{"a": {12, 4}, "b": {12, 2}, "c": {3, 1}})},
			leader: "a", term: 5, status: models.StatusOnline, changed: true},
		{name: "restored state, a replica has not reported: offline until it does",
			in:     master.ShardInputs{Assign: abc, States: online("a", 1), Live: liveAt(map[string][2]int64{"a": {12, 4}, "b": {12, 2}})},
			leader: "a", term: 1, status: models.StatusOffline, changed: true, reason: "missing [c]"},
		{name: "a newer term's log beats a longer tail from an older term",
			in: master.ShardInputs{Assign: abc, States: online("a", 2), Live: liveAt(map[string][2]int64{"b": {20, 1}, "c": {15, 2}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 2, Replicas: []string{"a", "b", "c"}}})},
			leader: "c", term: 3, status: models.StatusOnline, changed: true},
		{name: "offline shard, stale in-sync set (a replica holds a newer term): stays offline until all report",
			in: master.ShardInputs{Assign: abc, States: offline, Live: liveAt(map[string][2]int64{"b": {3, 7}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}})},
			leader: "a", term: 4, status: models.StatusOffline, changed: true, reason: "missing [a c]"},
		{name: "offline shard, stale in-sync set, every replica reported: newest log leads above its terms",
			in: master.ShardInputs{Assign: abc, States: offline, Live: liveAt(map[string][2]int64{"a": {2, 4}, "b": {3, 7}, "c": {9, 6}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 4, Replicas: []string{"a", "b"}}})},
			leader: "b", term: 8, status: models.StatusOnline, changed: true},
		// The nemesis' loss: the backup's set lists c, which has since fallen
		// behind (it holds term 5, the acknowledged writes of term 7 are only
		// on a and b, which are down). c must not lead.
		{name: "restored stale set lists a lagging replica, up-to-date ones down: offline, not the lagging one",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: liveAt(map[string][2]int64{"c": {40, 5}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}}})},
			leader: "a", term: 3, status: models.StatusOffline, changed: true, reason: "missing [a b]"},
		{name: "restored stale set, the up-to-date replicas return: the newest log leads",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: liveAt(map[string][2]int64{"a": {50, 7}, "b": {52, 7}, "c": {40, 5}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "c"}}})},
			leader: "b", term: 8, status: models.StatusOnline, changed: true},
		{name: "no in-sync set recorded but a replica holds data: stale, offline until all report",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: liveAt(map[string][2]int64{"b": {5, 2}, "c": {7, 2}})},
			leader: "a", term: 3, status: models.StatusOffline, changed: true, reason: "no in-sync set is recorded"},
		{name: "stale set never stops a live leader at the newest term",
			in: master.ShardInputs{Assign: abc, States: online("a", 7), Live: liveAt(map[string][2]int64{"a": {50, 7}, "c": {40, 5}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "c"}}})},
			leader: "a", term: 7, status: models.StatusOnline},
		// A restored copy of the set (written in etcd cluster 0x1, read from
		// 0x2) proves nothing, even when no live replica holds a newer term:
		// the lagging c, live leader of the restored state, is not kept.
		{name: "set restored from another etcd, restored leader live: re-elected from every replica's log",
			in: master.ShardInputs{Assign: abc, States: online("c", 3), ClusterID: 2, Live: liveAt(map[string][2]int64{"a": {50, 3}, "b": {52, 3}, "c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}, ClusterID: 1}})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "set restored from another etcd, up-to-date replicas down: offline, lagging one not elected",
			in: master.ShardInputs{Assign: abc, States: online("c", 3), ClusterID: 2, Live: liveAt(map[string][2]int64{"c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}, ClusterID: 1}})},
			leader: "c", term: 3, status: models.StatusOffline, changed: true, reason: "written in etcd cluster 1, this is 2"},
		{name: "set restored from another etcd, leader elected since (above its term): kept until it records its set",
			in: master.ShardInputs{Assign: abc, States: online("b", 4), ClusterID: 2, Live: liveAt(map[string][2]int64{"a": {50, 3}, "b": {52, 3}, "c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}, ClusterID: 1}})},
			leader: "b", term: 4, status: models.StatusOnline},
		// A restore marks a set that named no cluster (an older backup)
		// foreign: the same re-election as for another etcd's.
		{name: "set restored from an older backup (models.ForeignCluster), restored leader live: re-elected",
			in: master.ShardInputs{Assign: abc, States: online("c", 3), ClusterID: 2, Live: liveAt(map[string][2]int64{"a": {50, 3}, "b": {52, 3}, "c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}, ClusterID: models.ForeignCluster}})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true},
		{name: "set written in this etcd: the usual rule",
			in: master.ShardInputs{Assign: abc, States: online("c", 3), ClusterID: 2, Live: liveAt(map[string][2]int64{"c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}, ClusterID: 2}})},
			leader: "c", term: 3, status: models.StatusOnline},
		{name: "set of an unknown cluster (older writer): the usual rule",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), ClusterID: 2, Live: liveAt(map[string][2]int64{"c": {40, 3}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}}})},
			leader: "c", term: 4, status: models.StatusOnline, changed: true},
		{name: "in-sync set at the newest log term: the usual rule, fast",
			in: master.ShardInputs{Assign: abc, States: online("a", 7), Live: liveAt(map[string][2]int64{"b": {50, 7}, "c": {40, 5}}),
				ISR: statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 7, Replicas: []string{"a", "b"}}})},
			leader: "b", term: 8, status: models.StatusOnline, changed: true},
		{name: "a replica that does not answer is skipped, even with more data",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(map[string]uint64{"b": 5, "c": 9}),
				Answers: answers(map[string]uint64{"b": 5})},
			leader: "b", term: 4, status: models.StatusOnline, changed: true, reason: "c=no answer"},
		// A wiped replica (same node id, empty data dir) still listed in a
		// trusted set answers at once with an empty log; c, holding the
		// acknowledged writes (its record: term 3), is silent when the
		// round ends at its patience. b must not lead alone on having
		// answered.
		{name: "a wiped in-sync replica answers, a silent one's record shows a newer term: the silent one leads",
			in: master.ShardInputs{Assign: abc, States: online("a", 3), Live: liveAt(map[string][2]int64{"b": {0, 0}, "c": {40, 3}}),
				ISR:     statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: []string{"a", "b", "c"}}}),
				Answers: map[int]map[string]models.ReplicaTxn{0: {"b": {}}}},
			leader: "c", term: 4, status: models.StatusOnline, changed: true, reason: "c=no answer"},
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
			if s.Status == models.StatusOffline && tc.reason == "" {
				require.Contains(t, s.Reason, "no live in-sync replica")
			}
			if tc.reason != "" {
				require.Contains(t, s.Reason, tc.reason)
				if strings.Contains(tc.reason, "missing") {
					require.Contains(t, s.Reason, "stale in-sync set")
					require.Contains(t, s.Reason, `"unclean":true`)
				}
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
		Live: statemachine.MapOf(map[string]models.StorageNode{"b": {NodeID: "b"}, "c": {NodeID: "c"}}),
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
