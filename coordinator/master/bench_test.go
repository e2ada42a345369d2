package master_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// putDatabases writes config, assignment and states of databases directly,
// in txns of at most 99 ops, as a long-running master would have left them.
func (h *harness) putDatabases(dbs []models.Database, assign []models.Assignment, states []models.ShardStates) {
	h.t.Helper()
	var ops []kv.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		ok, _, err := h.store.Txn(context.Background(), nil, ops)
		require.NoError(h.t, err)
		require.True(h.t, ok)
		ops = ops[:0]
	}
	for i := range dbs {
		ops = append(ops,
			kv.OpPut(h.keys.DatabaseConfig(dbs[i].Name), mustJSON(h.t, dbs[i]), 0),
			kv.OpPut(h.keys.Assign(dbs[i].Name), mustJSON(h.t, assign[i]), 0),
			kv.OpPut(h.keys.ShardState(dbs[i].Name), mustJSON(h.t, states[i]), 0))
		if len(ops) >= 99 {
			flush()
		}
	}
	flush()
}

// BenchmarkFailover1000Shards: one node leads all 1000 shards of a database
// (each with a follower on one of two other nodes); its lease is revoked and
// the time until the one state value naming the new leaders is in etcd is
// reported.
func BenchmarkFailover1000Shards(b *testing.B) {
	const shards = 1000
	for range b.N {
		b.StopTimer()
		h := newHarness(b, "n1", "n2", "n3")
		db := models.Database{Name: "big", StorageCluster: cluster, NumShards: shards, ReplicaFactor: 2, Options: map[string]any{}}
		a := models.Assignment{DB: "big", Cluster: cluster}
		ss := models.ShardStates{DB: "big"}
		for i := range shards {
			a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: []string{"n1", []string{"n2", "n3"}[i%2]}})
			ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: "n1", Term: 1, Status: models.StatusOnline})
		}
		h.putDatabases([]models.Database{db}, []models.Assignment{a}, []models.ShardStates{ss})
		h.eventually("database loaded", func(st *statemachine.State) bool { return allOnline(st, "big", shards) })
		rm := h.startMaster(masterOpts{})
		h.settle(rm)

		ctx, cancel := context.WithCancel(context.Background())
		kvp, err := h.store.Get(ctx, h.keys.ShardState("big"))
		require.NoError(b, err)
		watch := h.store.Watch(ctx, h.keys.ShardState("big"), kvp.ModRev+1)
		b.StartTimer()
		h.kill("n1")
		start := time.Now()
		for done := false; !done; {
			r := <-watch
			require.NoError(b, r.Err)
			for _, ev := range r.Events {
				var got models.ShardStates
				require.NoError(b, json.Unmarshal(ev.KV.Value, &got))
				done = noneLedBy(got, "n1")
			}
		}
		took := time.Since(start)
		b.StopTimer()
		cancel()
		b.ReportMetric(float64(took.Microseconds())/1000, "ms/failover")
		b.Logf("1000 shards failed over in %v", took)
	}
}

// BenchmarkMasterRestart: 10,000 databases x 16 shards x RF 3 already in
// etcd; a fresh state manager and master rebuild their state and finish a
// reconcile pass with nothing to do. Reports the time and the heap in use.
func BenchmarkMasterRestart(b *testing.B) {
	const dbs, shards, rf = 10000, 16, 3
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	for range b.N {
		b.StopTimer()
		h := newHarness(b, nodes...)
		h.sm.Stop() // the restarted process starts from nothing
		var cfgs []models.Database
		var as []models.Assignment
		var ss []models.ShardStates
		g := 0
		for d := range dbs {
			name := fmt.Sprintf("db%05d", d)
			cfgs = append(cfgs, models.Database{Name: name, StorageCluster: cluster, NumShards: shards, ReplicaFactor: rf, Options: map[string]any{}})
			a := models.Assignment{DB: name, Cluster: cluster}
			s := models.ShardStates{DB: name}
			for i := range shards {
				a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: []string{nodes[g%6], nodes[(g+1)%6], nodes[(g+2)%6]}})
				s.Shards = append(s.Shards, models.ShardState{ID: i, Leader: nodes[g%6], Term: 1, Status: models.StatusOnline})
				g++
			}
			as, ss = append(as, a), append(ss, s)
		}
		h.putDatabases(cfgs, as, ss)
		cfgs, as, ss = nil, nil, nil
		runtime.GC()

		b.StartTimer()
		start := time.Now()
		h.sm = h.newManager()
		require.Eventually(b, func() bool {
			st := h.sm.Snapshot()
			return master.Ready(st) && st.ShardStates.Len() == dbs && st.Nodes.At(cluster).Len() == len(nodes)
		}, time.Minute, 5*time.Millisecond)
		loaded := time.Since(start)
		rm := h.startMaster(masterOpts{})
		// Run answers operations only between reconcile passes: the answer
		// comes after its first pass over the full state.
		err := rm.TransferLeader(context.Background(), "absent", 0, models.LeaderTransfer{NodeID: "n1"})
		require.True(b, errors.Is(err, models.ErrNotFound), "%v", err)
		took := time.Since(start)
		b.StopTimer()
		require.Equal(b, 0, len(h.owned())-2*dbs, "the pass wrote nothing new")
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(took.Milliseconds()), "ms/restart")
		b.ReportMetric(float64(loaded.Milliseconds()), "ms/state-load")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.Logf("state loaded in %v, first empty reconcile done at %v, heap in use %.1f MiB", loaded, took, float64(ms.HeapInuse)/(1<<20))
	}
}
