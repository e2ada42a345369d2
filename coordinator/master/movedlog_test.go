package master_test

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A replica that registered again at another address may run on a copy of
// its data dir taken at any moment, so its place in the in-sync set does not
// vouch for its log: it leads only when its answer is compared with every
// other live candidate's and wins, and a shard whose only live replicas
// moved waits for an in-sync replica that did not. Seen in the nemesis: the
// copy of a leader's data dir took its node id over while the followers'
// answers were missing, was elected at a new term with a log 48 entries
// short, and the followers truncated acknowledged writes to match it.
func TestMovedReplicaLeadsOnlyOnAComparedLog(t *testing.T) {
	const db = "db"
	abc := models.Assignment{DB: db, Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b", "c"}}}}
	solo := models.Assignment{DB: db, Cluster: cluster, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a"}}}}
	online := models.ShardStates{DB: db, Shards: []models.ShardState{{ID: 0, Leader: "a", Term: 4, Status: models.StatusOnline}}}
	isr := func(set ...string) statemachine.Map[models.ISR] {
		return statemachine.MapOf(map[string]models.ISR{"db/0": {Replicas: set, Term: 4}})
	}
	ans := func(logs map[string]uint64) map[int]map[string]models.ReplicaTxn {
		out := map[string]models.ReplicaTxn{}
		for n, txn := range logs {
			out[n] = models.ReplicaTxn{LastTxnID: txn, LastTerm: 4}
		}
		return map[int]map[string]models.ReplicaTxn{0: out}
	}
	moved := map[string]bool{"a": true}
	tests := []struct {
		name    string
		assign  models.Assignment
		live    map[string]uint64
		set     []string
		answers map[int]map[string]models.ReplicaTxn
		leader  string // "" = offline
		reason  string // in the reason when offline
	}{
		{"the others answered with longer logs: the longest leads", abc, map[string]uint64{"a": 0, "b": 0, "c": 0}, []string{"a", "b", "c"},
			ans(map[string]uint64{"a": 466, "b": 514, "c": 513}), "b", ""},
		{"only the moved replica answered: it is left out, not elected on its short log", abc, map[string]uint64{"a": 0, "b": 0, "c": 0}, []string{"a", "b", "c"},
			ans(map[string]uint64{"a": 466}), "b", ""},
		{"one other did not answer: the moved replica is left out even with the longest answer", abc, map[string]uint64{"a": 0, "b": 0, "c": 0}, []string{"a", "b", "c"},
			ans(map[string]uint64{"a": 900, "b": 514}), "b", ""},
		{"every live candidate answered and the moved log is the longest (a real move): it leads", abc, map[string]uint64{"a": 0, "b": 0, "c": 0}, []string{"a", "b", "c"},
			ans(map[string]uint64{"a": 520, "b": 514, "c": 513}), "a", ""},
		{"nobody asked: the replicas that did not move compete", abc, map[string]uint64{"a": 0, "b": 0, "c": 0}, []string{"a", "b", "c"},
			nil, "b", ""},
		{"only the moved replica is live, the set names others: the shard waits", abc, map[string]uint64{"a": 0}, []string{"a", "b", "c"},
			ans(map[string]uint64{"a": 466}), "", "registered again at another address"},
		{"the moved replica is the whole set (RF 1): it leads, no other copy exists", solo, map[string]uint64{"a": 0}, []string{"a"},
			ans(map[string]uint64{"a": 466}), "a", ""},
		{"the set shrank to the moved replica: it leads", abc, map[string]uint64{"a": 0}, []string{"a"},
			ans(map[string]uint64{"a": 466}), "a", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, changed := master.PlanLeaders(master.ShardInputs{DB: db, Assign: tc.assign, States: online, Live: live(tc.live),
				ISR: isr(tc.set...), Answers: tc.answers, Moved: moved})
			require.Equal(t, []int{0}, changed)
			got := next.Shards[0]
			if tc.leader == "" {
				require.Equal(t, models.StatusOffline, got.Status, "reason %q", got.Reason)
				require.Contains(t, got.Reason, tc.reason)
				return
			}
			require.Equal(t, models.StatusOnline, got.Status, "reason %q", got.Reason)
			require.Equal(t, tc.leader, got.Leader, "reason %q", got.Reason)
			require.Equal(t, int64(5), got.Term)
		})
	}
}

// The wait outlasts the pass that decided it: while the shard is offline
// for want of an in-sync replica that did not move, later passes keep the
// moved replica out (the move stays pending), and the first such replica
// to return leads.
func TestShardWaitingOnMovedReplicaKeepsWaiting(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3", "n4", "n5") // placement stays possible with two dead
	rm := h.startMaster(masterOpts{})
	h.createDB("mw", 1, 3)
	st := h.sm.Snapshot()
	before := st.ShardStates.At("mw").Shards[0]
	replicas := st.Assignments.At("mw").Shards[0].Replicas
	movedID := before.Leader
	var others []string
	for _, n := range replicas {
		if n != movedID {
			others = append(others, n)
		}
	}
	sid := models.ShardID("mw", 0)
	h.writeISR("mw", 0, models.ISR{Replicas: replicas, Term: before.Term})
	for _, n := range replicas {
		h.setTxn(n, map[string]uint64{sid: 10})
	}
	h.settle(rm)

	// Both followers die; the leader's id registers again at another
	// address (a copy of its data dir, 5 entries short).
	h.kill(others[0])
	h.kill(others[1])
	h.setTxn(movedID, map[string]uint64{sid: 5})
	h.moveNode(movedID, movedID+".test:2")

	s := h.waitShard("mw", 0, "offline, waiting for a replica that did not move", func(s models.ShardState) bool {
		return s.Status == models.StatusOffline
	})
	require.Contains(t, s.Reason, "registered again at another address")
	// Later passes keep waiting.
	h.settle(rm)
	h.settle(rm)
	s = h.etcdStates("mw").Shards[0]
	require.Equal(t, models.StatusOffline, s.Status, "a later pass elected the moved replica: %+v", s)

	// A follower that did not move returns: it leads.
	h.register(others[0], map[string]uint64{sid: 10})
	s = h.waitShard("mw", 0, "led by the returning in-sync replica", func(s models.ShardState) bool {
		return s.Status == models.StatusOnline
	})
	require.Equal(t, others[0], s.Leader)
	require.Greater(t, s.Term, before.Term)
}
