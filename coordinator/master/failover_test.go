package master_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestFailoverReelectsInSyncReplicas: the shards of a dead leader go to the
// live in-sync replica with the highest last_txn_id, at term + 1, in one
// publication; the others are untouched. How fast is measured by
// BenchmarkFailover1000Shards, not asserted here.
func TestFailoverReelectsInSyncReplicas(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{})
	const shards = 6
	h.createDB("fo", shards, 3)

	before := h.etcdStates("fo")
	victim := before.Shards[0].Leader
	var led []int
	for _, s := range before.Shards {
		if s.Leader == victim {
			led = append(led, s.ID)
		}
	}
	var survivors []string
	for _, n := range nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	// Survivors' progress differs per shard, so the highest last_txn_id
	// decides; on the first led shard the most advanced survivor is out of
	// the in-sync set and must not be picked.
	s0, s1 := survivors[0], survivors[1]
	t0, t1 := map[string]uint64{}, map[string]uint64{}
	expect := map[int]string{}
	for _, id := range led {
		key := models.ShardID("fo", id)
		t0[key], t1[key] = uint64(10*id+1), uint64(10*id+5)
		expect[id] = s1
		if id%2 == 1 {
			t0[key], t1[key] = t1[key], t0[key]
			expect[id] = s0
		}
	}
	h.setTxn(s0, t0)
	h.setTxn(s1, t1)
	first := led[0]
	h.writeISR("fo", first, models.ISR{Leader: victim, Term: 1, Replicas: []string{victim, notExpected(expect[first], s0, s1)}})
	expect[first] = notExpected(expect[first], s0, s1)
	h.eventually("in-sync set seen", func(st *statemachine.State) bool {
		_, isr := st.ISR.At(cluster).Get(models.ShardID("fo", first))
		return isr
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := h.store.Get(ctx, h.keys.ShardState("fo"))
	require.NoError(t, err)
	watch := h.store.Watch(ctx, h.keys.ShardState("fo"), kv.ModRev+1)

	h.kill(victim)
	var after models.ShardStates
	deadline := time.After(waitFor)
	for done := false; !done; {
		select {
		case r := <-watch:
			require.NoError(t, r.Err)
			for _, ev := range r.Events {
				require.NoError(t, json.Unmarshal(ev.KV.Value, &after))
				done = noneLedBy(after, victim)
			}
		case <-deadline:
			t.Fatalf("shards led by %s not re-elected after %v", victim, waitFor)
		}
	}

	for _, s := range after.Shards {
		prev := before.Shards[s.ID]
		if want, ok := expect[s.ID]; ok {
			require.Equal(t, want, s.Leader, "shard %d", s.ID)
			require.Equal(t, prev.Term+1, s.Term, "shard %d", s.ID)
		} else {
			require.Equal(t, prev, s, "shard %d was not led by the dead node", s.ID)
		}
		require.Equal(t, models.StatusOnline, s.Status)
		if _, ok := expect[s.ID]; ok {
			require.Contains(t, s.Reason, "leader "+s.Leader+" (highest last_txn_id", "shard %d: the answers and the choice are in the reason", s.ID)
		}
	}
}

func notExpected(x, a, b string) string {
	if x == a {
		return b
	}
	return a
}

func noneLedBy(ss models.ShardStates, node string) bool {
	for _, s := range ss.Shards {
		if s.Leader == node && s.Status == models.StatusOnline {
			return false
		}
	}
	return true
}

// waitShard waits until the local state shows the shard as want says.
func (h *harness) waitShard(db string, shard int, what string, want func(s models.ShardState) bool) models.ShardState {
	h.t.Helper()
	var got models.ShardState
	h.eventually(what, func(st *statemachine.State) bool {
		s, ok := st.ShardState(db, shard)
		got = s
		return ok && want(s)
	})
	return got
}

func TestOfflineAndBack(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	rm := h.startMaster(masterOpts{})
	h.createDB("off", 3, 2)
	st := h.sm.Snapshot()
	replicas := st.Assignments.At("off").Shards[0].Replicas
	s, _ := st.ShardState("off", 0)
	a := s.Leader
	b := notExpected(a, replicas[0], replicas[1])

	// Leader dies: the other replica leads at term 2, and as the new leader
	// it shrinks the in-sync set to itself.
	h.kill(a)
	s = h.waitShard("off", 0, "b leads", func(s models.ShardState) bool { return s.Leader == b && s.Status == models.StatusOnline })
	require.Equal(t, int64(2), s.Term)
	h.writeISR("off", 0, models.ISR{Leader: b, Term: 2, Replicas: []string{b}})
	// The master decides on what its state has seen: wait for the set.
	h.eventually("in-sync set seen", func(st *statemachine.State) bool {
		return st.ISR.At(cluster).At(models.ShardID("off", 0)).Term == 2
	})

	// Every replica gone: offline, naming the last in-sync set.
	h.kill(b)
	s = h.waitShard("off", 0, "offline", func(s models.ShardState) bool { return s.Status == models.StatusOffline })
	require.Contains(t, s.Reason, "no live in-sync replica")
	require.Equal(t, int64(2), s.Term)
	require.Equal(t, models.StatusOffline, h.etcdStates("off").Shards[0].Status)

	// The last in-sync replica returns: online with it, term 3.
	h.register(b, nil)
	s = h.waitShard("off", 0, "b back", func(s models.ShardState) bool { return s.Status == models.StatusOnline })
	require.Equal(t, b, s.Leader)
	require.Equal(t, int64(3), s.Term)

	// Gone again; now the node that is not in the last in-sync set returns:
	// the shard must stay offline, since a would lose b's writes.
	h.kill(b)
	h.waitShard("off", 0, "offline again", func(s models.ShardState) bool { return s.Status == models.StatusOffline })
	h.register(a, nil)
	h.eventually("a live", func(st *statemachine.State) bool { _, ok := st.Nodes.At(cluster).Get(a); return ok })
	h.settle(rm)
	s = h.etcdStates("off").Shards[0]
	require.Equal(t, models.StatusOffline, s.Status)
	require.Equal(t, int64(3), s.Term)

	// Graceful transfer refuses; the unclean one brings it online.
	h.admin.Master = rm
	code, body := h.do(http.MethodPost, "/api/v1/databases/off/shards/0/leader", map[string]any{"node_id": a})
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	code, body = h.do(http.MethodPost, "/api/v1/databases/off/shards/0/leader", map[string]any{"node_id": a, "unclean": true})
	require.Equal(t, http.StatusAccepted, code, body)
	s = h.etcdStates("off").Shards[0]
	require.Equal(t, models.StatusOnline, s.Status)
	require.Equal(t, a, s.Leader)
	require.Equal(t, int64(4), s.Term)
	require.Equal(t, a, h.shards("off")[0].Leader)
}

// A storage cluster whose etcd cannot be reached must not stall the master's
// work on the clusters it can see.
func TestUnreachableClusterDoesNotStallOthers(t *testing.T) {
	h := newHarness(t, "n1", "n2")
	_, err := h.store.Put(context.Background(), h.keys.StorageConfig("far"),
		mustJSON(t, models.StorageCluster{Name: "far", EtcdEndpoints: []string{"http://127.0.0.1:1"}}), 0)
	require.NoError(t, err)
	h.eventually("far configured", func(st *statemachine.State) bool { _, ok := st.StorageClusters["far"]; return ok })
	h.startMaster(masterOpts{})
	h.createDB("near", 4, 2)
	victim := h.etcdStates("near").Shards[0].Leader
	h.kill(victim)
	h.eventually("leadership moved off the dead node", func(st *statemachine.State) bool {
		for _, s := range st.ShardStates.At("near").Shards {
			if s.Leader == victim || s.Status != models.StatusOnline {
				return false
			}
		}
		return true
	})
}

// A master whose term was won in another etcd cluster than the one its state
// was listed from (etcd replaced or restored underneath) decides nothing until
// its state has been re-listed from the new cluster.
func TestMasterIgnoresStateFromAnotherCluster(t *testing.T) {
	h := newHarness(t, "n1", "n2")
	rm := h.startMaster(masterOpts{clusterID: 42}) // not the harness etcd's id
	_, err := h.admin.CreateDatabase(context.Background(), models.Database{Name: "elsewhere", NumShards: 2, ReplicaFactor: 1})
	require.NoError(t, err)
	h.eventually("database seen", func(st *statemachine.State) bool { _, ok := st.Databases.Get("elsewhere"); return ok })
	// Passes that saw the database have run (a write would have been
	// awaited within its pass): nothing was placed.
	h.settle(rm)
	_, placed := h.sm.Snapshot().Assignments.Get("elsewhere")
	require.False(t, placed, "a master acted on state listed from another etcd cluster")
	rm.stop()
	require.NoError(t, h.store.Revoke(context.Background(), rm.election.Lease()))
	h.startMaster(masterOpts{})
	h.eventually("placed once the term and the state agree", func(st *statemachine.State) bool {
		return allOnline(st, "elsewhere", 2)
	})
}
