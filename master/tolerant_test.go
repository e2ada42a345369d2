package master_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// rewriteByHand stores v's JSON pretty-printed with an unknown field added,
// as an operator with etcdctl or another Cairn version might: same meaning,
// other bytes than Go's encoding.
func (h *harness) rewriteByHand(key string, v any, extra map[string]any) int64 {
	h.t.Helper()
	var m map[string]any
	require.NoError(h.t, json.Unmarshal(mustJSON(h.t, v), &m))
	for k, x := range extra {
		m[k] = x
	}
	b, err := json.MarshalIndent(m, "", "    ")
	require.NoError(h.t, err)
	rev, err := h.store.Put(context.Background(), key, b, 0)
	require.NoError(h.t, err)
	return rev
}

// A database whose assignment and shard states were rewritten by hand (other
// bytes, unknown fields) still fails over: the master compares mod revisions,
// not re-encoded values.
func TestFailoverOfHandWrittenValues(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	h.createDB("hand", 3, 3)
	st := h.sm.Snapshot()
	h.rewriteByHand(h.keys.Assign("hand"), st.Assignments["hand"], map[string]any{"written_by": "cairn 9.9"})
	states := st.ShardStates["hand"]
	rev := h.rewriteByHand(h.keys.ShardState("hand"), states, map[string]any{"comment": "edited with etcdctl"})
	h.eventually("hand-written values seen", func(st *statemachine.State) bool {
		return st.ModRev(statemachine.SourceShardState, "hand") == rev
	})

	victim := states.Shards[0].Leader
	h.kill(victim)
	h.eventually("leadership moved off the dead node", func(st *statemachine.State) bool {
		for _, s := range st.ShardStates["hand"].Shards {
			if s.Leader == victim || s.Status != models.StatusOnline {
				return false
			}
		}
		return true
	})
	after := h.etcdStates("hand")
	for i, s := range after.Shards {
		if states.Shards[i].Leader == victim {
			require.Equal(t, states.Shards[i].Term+1, s.Term, "shard %d", i)
		}
	}
}

// A shard state without a status (an older or hand-written value) is read as
// offline and brought back online by the master under a new term.
func TestMissingStatusDefaultsToOffline(t *testing.T) {
	h := newHarness(t, "n1", "n2")
	h.startMaster(masterOpts{})
	h.createDB("bare", 1, 2)
	s, _ := h.sm.Snapshot().ShardState("bare", 0)
	raw := `{"shards": [ {"id": 0, "leader": "` + s.Leader + `", "term": 5} ]}`
	_, err := h.store.Put(context.Background(), h.keys.ShardState("bare"), []byte(raw), 0)
	require.NoError(t, err)
	got := h.waitShard("bare", 0, "back online above the stored term", func(s models.ShardState) bool {
		return s.Status == models.StatusOnline && s.Term == 6
	})
	require.Equal(t, "bare", h.etcdStates("bare").DB)
	require.NotEmpty(t, got.Leader)
}

// Shard states restored from an older backup name terms below what the
// replicas' logs hold: the master re-publishes those shards above every such
// term (the leader by the usual rule), leaving the others alone.
func TestRestoredTermsBelowReplicaLogsAreRaised(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	h.createDB("old", 2, 3)
	before := h.etcdStates("old")
	// The replicas' logs of shard 0 hold term 4 (a failover the restored
	// state never saw); n3's log is the longest.
	id := models.ShardID("old", 0)
	h.setTxn("n3", map[string]uint64{id: 30})
	for _, n := range []string{"n3", "n1", "n2"} {
		h.setMaxTerm(n, map[string]int64{id: 4, models.ShardID("old", 1): 1})
	}
	s := h.waitShard("old", 0, "shard 0 above its replicas' terms", func(s models.ShardState) bool { return s.Term > 4 })
	require.Equal(t, int64(5), s.Term)
	require.Equal(t, "n3", s.Leader, "the most advanced in-sync replica leads")
	require.Equal(t, models.StatusOnline, s.Status)
	require.Equal(t, before.Shards[1], h.etcdStates("old").Shards[1], "a shard at the terms its replicas hold stays")
}
