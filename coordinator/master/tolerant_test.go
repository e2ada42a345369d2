package master_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	h.rewriteByHand(h.keys.Assign("hand"), st.Assignments.At("hand"), map[string]any{"written_by": "cairn 9.9"})
	states := st.ShardStates.At("hand")
	rev := h.rewriteByHand(h.keys.ShardState("hand"), states, map[string]any{"comment": "edited with etcdctl"})
	h.eventually("hand-written values seen", func(st *statemachine.State) bool {
		return st.ModRev(statemachine.SourceShardState, "hand") == rev
	})

	victim := states.Shards[0].Leader
	h.kill(victim)
	h.eventually("leadership moved off the dead node", func(st *statemachine.State) bool {
		for _, s := range st.ShardStates.At("hand").Shards {
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

// TestRestoredStaleISRElectsNoLaggingReplica: a restored backup's in-sync set
// of shard 0 (term 1) still lists n3, which has since fallen behind: n1 and
// n2 hold the acknowledged writes of term 3, n3's log stops at term 2. With
// n1 and n2 down, the master must not elect n3 (it would be elected from the
// stale set, and n1 and n2 would truncate their acknowledged tails to its
// log on return): the shard stays offline, naming the missing replicas and
// the unclean escape hatch. Once both return, the newest log leads, above
// every term the replicas hold.
func TestRestoredStaleISRElectsNoLaggingReplica(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	first := h.startMaster(masterOpts{shadow: true})
	h.createDB("rst", 1, 3)
	first.stop()
	require.NoError(t, h.store.Revoke(context.Background(), first.election.Lease()))

	// What the restore leaves: the backup's shard state (term 1) and set.
	id := models.ShardID("rst", 0)
	ss := h.etcdStates("rst")
	ss.Shards[0] = models.ShardState{ID: 0, Leader: "n1", Term: 1, Status: models.StatusOnline}
	_, err := h.store.Put(context.Background(), h.keys.ShardState("rst"), mustJSON(t, ss), 0)
	require.NoError(t, err)
	h.writeISR("rst", 0, models.ISR{Leader: "n1", Term: 1, Replicas: []string{"n1", "n2", "n3"}})
	h.kill("n1")
	h.kill("n2")
	h.setTxn("n3", map[string]uint64{id: 20})
	h.setMaxTerm("n3", map[string]int64{id: 2})
	h.eventually("restored picture loaded", func(st *statemachine.State) bool {
		_, n1 := st.Nodes.At(cluster).Get("n1")
		return !n1 && st.Nodes.At(cluster).At("n3").MaxTerm[id] == 2 && st.ISR.At(cluster).At(id).Term == 1
	})

	states := h.collect(h.keys.ShardState("rst"))
	h.startMaster(masterOpts{})
	s := h.waitShard("rst", 0, "shard offline for want of n1 and n2", func(s models.ShardState) bool {
		return s.Status == models.StatusOffline
	})
	require.Contains(t, s.Reason, "missing [n1 n2]")
	require.Contains(t, s.Reason, `"unclean":true`)

	// n1 returns with the acknowledged tail; n2 is still away: still offline.
	h.registerAt("n1", map[string]uint64{id: 50}, map[string]int64{id: 3})
	h.waitShard("rst", 0, "still waiting for n2", func(s models.ShardState) bool {
		return s.Status == models.StatusOffline && strings.Contains(s.Reason, "missing [n2]")
	})

	// n2 returns with the longest log of the newest term: it leads, above
	// term 3.
	h.registerAt("n2", map[string]uint64{id: 52}, map[string]int64{id: 3})
	s = h.waitShard("rst", 0, "the newest log leads", func(s models.ShardState) bool { return s.Status == models.StatusOnline })
	require.Equal(t, "n2", s.Leader)
	require.Equal(t, int64(4), s.Term)

	for _, kv := range states.all(t) {
		var got models.ShardStates
		require.NoError(t, json.Unmarshal(kv.Value, &got))
		for _, x := range got.Shards {
			if x.Status == models.StatusOnline && x.Term > 1 {
				require.NotEqual(t, "n3", x.Leader, "the lagging replica was elected at term %d", x.Term)
			}
		}
	}
}

// registerAt (re)creates a node's leased record with its logs' last txn ids
// and terms in one write, as a returning storage node registers.
func (h *harness) registerAt(id string, txn map[string]uint64, terms map[string]int64) {
	h.t.Helper()
	ctx := context.Background()
	lease, err := h.store.Grant(ctx, nodeTTL)
	require.NoError(h.t, err)
	kctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	_, err = h.store.KeepAlive(kctx, lease)
	require.NoError(h.t, err)
	rec := models.StorageNode{NodeID: id, NodeAddress: id + ".test:1", Role: "storage", Cluster: cluster,
		LastUpdated: time.Now().UnixMicro(), LastTxnID: txn, MaxTerm: terms}
	_, err = h.store.Put(ctx, h.ck.Node(id), mustJSON(h.t, rec), lease)
	require.NoError(h.t, err)
	h.mu.Lock()
	h.nodes[id], h.recs[id] = lease, rec
	if h.txn[id] == nil {
		h.txn[id] = map[string]uint64{}
	}
	for k, v := range txn {
		h.txn[id][k] = v // what the node answers at failover
	}
	h.mu.Unlock()
}

// TestISRRestoredFromAnotherEtcdIsNotTrusted: the restored set names n3, the
// restored state has n3 leading at term 1, and no live replica holds a newer
// term (n3 fell behind within term 1: n1 and n2 hold the acknowledged tail).
// The set was written in another etcd cluster, so the master does not keep
// n3: the shard waits for n2 (down), then the longest log leads.
func TestISRRestoredFromAnotherEtcdIsNotTrusted(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	first := h.startMaster(masterOpts{shadow: true})
	h.createDB("rc", 1, 3)
	first.stop()
	require.NoError(t, h.store.Revoke(context.Background(), first.election.Lease()))

	ctx := context.Background()
	cid, err := h.store.ClusterID(ctx)
	require.NoError(t, err)
	id := models.ShardID("rc", 0)
	ss := h.etcdStates("rc")
	ss.Shards[0] = models.ShardState{ID: 0, Leader: "n3", Term: 1, Status: models.StatusOnline}
	_, err = h.store.Put(ctx, h.keys.ShardState("rc"), mustJSON(t, ss), 0)
	require.NoError(t, err)
	h.writeISR("rc", 0, models.ISR{Leader: "n3", Term: 1, Replicas: []string{"n1", "n2", "n3"}, ClusterID: cid + 1})
	h.kill("n2")
	h.setTxn("n1", map[string]uint64{id: 50})
	h.setMaxTerm("n1", map[string]int64{id: 1})
	h.setTxn("n3", map[string]uint64{id: 40})
	h.setMaxTerm("n3", map[string]int64{id: 1})
	h.eventually("restored picture loaded", func(st *statemachine.State) bool {
		_, n2 := st.Nodes.At(cluster).Get("n2")
		return !n2 && st.Nodes.At(cluster).At("n1").MaxTerm[id] == 1 && st.Nodes.At(cluster).At("n3").MaxTerm[id] == 1 &&
			st.ISR.At(cluster).At(id).ClusterID == cid+1
	})

	states := h.collect(h.keys.ShardState("rc"))
	rm := h.startMaster(masterOpts{})
	s := h.waitShard("rc", 0, "offline for want of n2", func(s models.ShardState) bool { return s.Status == models.StatusOffline })
	require.Contains(t, s.Reason, "missing [n2]")
	require.Contains(t, s.Reason, "was written in etcd cluster")

	h.registerAt("n2", map[string]uint64{id: 52}, map[string]int64{id: 1})
	s = h.waitShard("rc", 0, "the longest log leads", func(s models.ShardState) bool { return s.Status == models.StatusOnline })
	require.Equal(t, "n2", s.Leader)
	require.Equal(t, int64(2), s.Term)
	// The new leadership is above the restored set's term: it is kept while
	// n2 has not recorded its own set yet (no term churn).
	h.settle(rm)
	require.Equal(t, s, h.etcdStates("rc").Shards[0])
	for _, kv := range states.all(t) {
		var got models.ShardStates
		require.NoError(t, json.Unmarshal(kv.Value, &got))
		for _, x := range got.Shards {
			if x.Status == models.StatusOnline && x.Term > 1 {
				require.NotEqual(t, "n3", x.Leader, "the lagging replica was elected at term %d", x.Term)
			}
		}
	}
}
