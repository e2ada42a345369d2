package master_test

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// fencedLive is live nodes with a last_txn_id for db/0; those in fenced
// carry a disk fault (they cannot accept writes).
func fencedLive(txn map[string]uint64, fenced ...string) statemachine.Map[models.StorageNode] {
	m := live(txn)
	for _, id := range fenced {
		m = m.Set(id, models.StorageNode{NodeID: id, DiskFault: &models.DiskFault{Kind: models.DiskFull, Path: "/d/log.d/1.wal"}})
	}
	return m
}

// TestPlanLeadersFencedNodes: a live leader whose disk failed is replaced
// as a dead one would be, by an in-sync replica that takes writes; a fenced
// node leads only when no replica that takes writes can (RF 1 stays with
// it, online, answering 507, rather than going offline).
func TestPlanLeadersFencedNodes(t *testing.T) {
	abc := models.Assignment{DB: "db", Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b", "c"}}}}
	rf1 := models.Assignment{DB: "db", Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a"}}}}
	online := func(leader string, term int64) models.ShardStates {
		return models.ShardStates{DB: "db", Shards: []models.ShardState{{ID: 0, Leader: leader, Term: term, Status: models.StatusOnline}}}
	}
	isr := func(nodes ...string) statemachine.Map[models.ISR] {
		return statemachine.MapOf(map[string]models.ISR{"db/0": {Leader: "a", Term: 3, Replicas: nodes}})
	}
	all := map[string]uint64{"a": 9, "b": 9, "c": 9}
	tests := []struct {
		name    string
		in      master.ShardInputs
		leader  string
		term    int64
		changed bool
	}{
		{name: "fenced leader: the in-sync replica with the newest log that takes writes leads, term+1",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(map[string]uint64{"a": 9, "b": 8, "c": 9}, "a"), Answers: answers(map[string]uint64{"a": 9, "b": 8, "c": 9})},
			leader: "c", term: 4, changed: true},
		{name: "fenced leader, the replica with the newest log fenced too: the other one leads",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(map[string]uint64{"a": 9, "b": 8, "c": 9}, "a", "c"), Answers: answers(map[string]uint64{"a": 9, "b": 8, "c": 9})},
			leader: "b", term: 4, changed: true},
		{name: "fenced leader, RF 1: it stays, online, same term",
			in:     master.ShardInputs{Assign: rf1, States: online("a", 3), Live: fencedLive(map[string]uint64{"a": 9}, "a"), Answers: answers(map[string]uint64{"a": 9})},
			leader: "a", term: 3},
		{name: "fenced leader, every replica fenced: it stays",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(all, "a", "b", "c"), Answers: answers(all)},
			leader: "a", term: 3},
		{name: "fenced leader, the replica that takes writes is not in sync: it stays",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(all, "a", "b"), Answers: answers(all), ISR: isr("a", "b")},
			leader: "a", term: 3},
		{name: "fenced leader, the replica that takes writes did not answer: it stays, no new term",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(all, "a", "b"), Answers: answers(map[string]uint64{"a": 9, "b": 9}), ISR: isr("a", "b", "c")},
			leader: "a", term: 3},
		{name: "dead leader: a fenced replica is passed over despite the newest log",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(map[string]uint64{"b": 9, "c": 5}, "b"), Answers: answers(map[string]uint64{"b": 9, "c": 5})},
			leader: "c", term: 4, changed: true},
		{name: "dead leader, only a fenced replica in sync: it leads rather than the shard going offline",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: fencedLive(map[string]uint64{"b": 9, "c": 5}, "b"), Answers: answers(map[string]uint64{"b": 9, "c": 5}), ISR: isr("a", "b")},
			leader: "b", term: 4, changed: true},
		{name: "fault cleared: a leader that takes writes again stays",
			in:     master.ShardInputs{Assign: abc, States: online("a", 3), Live: live(all), Answers: answers(all)},
			leader: "a", term: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.DB = "db"
			next, changed := master.PlanLeaders(tt.in)
			s := next.Shards[0]
			require.Equal(t, tt.leader, s.Leader)
			require.Equal(t, tt.term, s.Term)
			require.Equal(t, models.StatusOnline, s.Status)
			require.Equal(t, tt.changed, len(changed) == 1)
		})
	}
}

// TestSpreadLeadersSkipsFencedNodes: spreading never hands a leadership to
// a node that cannot accept writes, nor moves one off it (failover's work).
func TestSpreadLeadersSkipsFencedNodes(t *testing.T) {
	abc := []string{"a", "b", "c"}
	in := spreadCase([][]string{abc, abc, abc, abc, abc, abc}, []string{"a", "a", "a", "b", "b", "b"}, "a", "b", "c")
	in.Live = in.Live.Set("c", models.StorageNode{NodeID: "c", DiskFault: &models.DiskFault{Kind: models.DiskError}})
	t0 := time.Unix(1_000_000, 0)
	_, changed := master.SpreadLeaders(master.SpreadInput{ShardInputs: in, StableSince: t0, Now: t0.Add(time.Hour), Delay: time.Second})
	require.Empty(t, changed, "c is the only node leading less, and it cannot take writes")

	in.Live = in.Live.Set("c", models.StorageNode{NodeID: "c"})
	next, changed := master.SpreadLeaders(master.SpreadInput{ShardInputs: in, StableSince: t0, Now: t0.Add(time.Hour), Delay: time.Second})
	require.Len(t, changed, 2, "once it takes writes again, c gets its share")
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, leaderCounts(next, "a", "b", "c"))
}
