package master_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// setSeenTerm rewrites a live node's record with the highest terms its
// replicas accepted (seen_term), as the storage host reports them.
func (h *harness) setSeenTerm(id string, terms map[string]int64) {
	h.t.Helper()
	h.mu.Lock()
	rec, lease := h.recs[id], h.nodes[id]
	rec.SeenTerm = terms
	h.recs[id] = rec
	h.mu.Unlock()
	_, err := h.store.Put(context.Background(), h.ck.Node(id), mustJSON(h.t, rec), lease)
	require.NoError(h.t, err)
}

// leadersByTerm reads every shard-state value collected and returns, per
// term of one shard, the leaders published at it.
func leadersByTerm(t *testing.T, c *collector, shard int) map[int64][]string {
	out := map[int64][]string{}
	for _, kvp := range c.all(t) {
		var ss models.ShardStates
		require.NoError(t, json.Unmarshal(kvp.Value, &ss))
		for _, s := range ss.Shards {
			if s.ID == shard && s.Leader != "" && !slices.Contains(out[s.Term], s.Leader) {
				out[s.Term] = append(out[s.Term], s.Leader)
			}
		}
	}
	return out
}

// A leader elected at term 2 that wrote nothing leaves no term-2 entry in
// any log (max_term stays 1), only in the replicas' seen terms. After etcd is
// rolled back to the term-1 backup (state and in-sync set of another etcd
// cluster), the master publishes the shard at term 3: never term 2 again,
// which another leader could get.
func TestRestoreAfterEmptyLeadershipNeverReusesItsTerm(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	history := h.collect(h.keys.ShardState("emp"))
	first := h.startMaster(masterOpts{shadow: true})
	h.createDB("emp", 1, 3)
	backup := h.etcdStates("emp")
	require.Equal(t, int64(1), backup.Shards[0].Term)
	id := models.ShardID("emp", 0)

	// A graceful transfer to another replica: term 2, nothing written at it.
	to := "n1"
	if backup.Shards[0].Leader == to {
		to = "n2"
	}
	require.NoError(t, first.TransferLeader(context.Background(), "emp", 0, models.LeaderTransfer{NodeID: to}))
	h.waitShard("emp", 0, "transferred at term 2", func(s models.ShardState) bool { return s.Term == 2 && s.Leader == to })
	for _, n := range []string{"n1", "n2", "n3"} {
		h.setMaxTerm(n, map[string]int64{id: 1})
		h.setSeenTerm(n, map[string]int64{id: 2})
	}
	first.stop()
	require.NoError(t, h.store.Revoke(context.Background(), first.election.Lease()))

	// The restore: the backup's state (term 1) and its in-sync set, written
	// in another etcd cluster.
	_, err := h.store.Put(context.Background(), h.keys.ShardState("emp"), mustJSON(t, backup), 0)
	require.NoError(t, err)
	h.writeISR("emp", 0, models.ISR{Leader: backup.Shards[0].Leader, Term: 1, Replicas: []string{"n1", "n2", "n3"}, ClusterID: 0xdead})
	h.eventually("restored picture loaded", func(st *statemachine.State) bool {
		s, _ := st.ShardState("emp", 0)
		return s.Term == 1 && st.ISR.At(cluster).At(id).ClusterID == 0xdead && st.Nodes.At(cluster).At("n3").SeenTerm[id] == 2
	})

	h.startMaster(masterOpts{})
	s := h.waitShard("emp", 0, "published above every term ever published", func(s models.ShardState) bool { return s.Term > 1 })
	require.Equal(t, int64(3), s.Term, "one above the seen term 2")
	require.Equal(t, models.StatusOnline, s.Status)
	byTerm := leadersByTerm(t, history, 0)
	require.Equal(t, []string{to}, byTerm[2], "term 2 had one leader")
	for term, leaders := range byTerm {
		require.Len(t, leaders, 1, "term %d led by %v", term, leaders)
	}
}

// A storage node id that registers again at another address (the old
// holder's lease gone; here the master never even sees the gap) is a leave
// and a join: every online shard it is a replica of is published again one
// term up, the leader by the usual rule (the best log among the live
// in-sync replicas: n-best here); shards it holds no replica of stay.
func TestMovedNodeShardsRepublishedAtNewTerm(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3", "n4")
	rm := h.startMaster(masterOpts{})
	h.createDB("mv", 4, 2)
	st := h.sm.Snapshot()
	before := st.ShardStates.At("mv")
	a := st.Assignments.At("mv")
	moved := before.Shards[0].Leader
	var holds, other []int
	for _, sh := range a.Shards {
		if slices.Contains(sh.Replicas, moved) {
			holds = append(holds, sh.ID)
		} else {
			other = append(other, sh.ID)
		}
	}
	require.NotEmpty(t, other, "the test needs a shard without the moved node")
	// The other replica of each shard it holds has the longer log.
	txn := map[string]map[string]uint64{}
	for _, id := range holds {
		for _, r := range a.Shards[id].Replicas {
			if txn[r] == nil {
				txn[r] = map[string]uint64{}
			}
			txn[r][models.ShardID("mv", id)] = 10
			if r == moved {
				txn[r][models.ShardID("mv", id)] = 5
			}
		}
	}
	for n, t := range txn {
		h.setTxn(n, t)
	}
	h.settle(rm)

	// The id's record is replaced by one at another address, under a new
	// lease, in one write.
	h.moveNode(moved, moved+".test:2")

	for _, id := range holds {
		s := h.waitShard("mv", id, "republished one term up", func(s models.ShardState) bool { return s.Term > before.Shards[id].Term })
		require.Equal(t, before.Shards[id].Term+1, s.Term, "shard %d", id)
		require.Equal(t, models.StatusOnline, s.Status, "shard %d", id)
		require.NotEqual(t, moved, s.Leader, "shard %d: the replica with the longer log leads", id)
	}
	h.settle(rm)
	after := h.etcdStates("mv")
	for _, id := range other {
		require.Equal(t, before.Shards[id], after.Shards[id], "shard %d does not hold the moved node", id)
	}
	// Once: a later pass does not bump the terms again.
	h.settle(rm)
	require.Equal(t, after, h.etcdStates("mv"))
}
