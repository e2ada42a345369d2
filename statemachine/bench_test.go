package statemachine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// BenchmarkQueueAndReducers pushes decoded events through the one queue and the
// one consumer: b.N events, measured until the last is applied.
func BenchmarkQueueAndReducers(b *testing.B) {
	m := statemachine.New(statemachine.Config{QueueSize: 8192})
	m.Start(context.Background())
	defer m.Stop()
	evs := make([]statemachine.Event, 256)
	for i := range evs {
		id := "n" + strconv.Itoa(i%64)
		evs[i] = statemachine.Event{Source: "nodes", Kind: statemachine.KindStorageNodes, Cluster: "default",
			Type: kv.WatchPut, Name: id, Value: models.StorageNode{NodeID: id, LastUpdated: int64(i)}, Rev: int64(i + 1)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Push(evs[i%len(evs)])
	}
	// Wait for the consumer to drain: one final marker event.
	m.Push(statemachine.Event{Source: "end", Type: kv.WatchSynced, Rev: 1})
	for {
		changed := m.Changed()
		if m.Snapshot().Synced["end"] {
			break
		}
		<-changed
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkSnapshotRead(b *testing.B) {
	m := statemachine.New(statemachine.Config{})
	b.ReportAllocs()
	var n int
	for i := 0; i < b.N; i++ {
		n += m.Snapshot().Databases.Len()
	}
	_ = n
}

// populated is a Manager whose state holds dbs databases (4 shards, RF 3,
// an in-sync set per shard) on nodes storage nodes of cluster "default".
func populated(dbs, nodes int) *statemachine.Manager {
	m := statemachine.New(statemachine.Config{})
	var evs []statemachine.Event
	rev := int64(0)
	ev := func(src string, kind statemachine.Kind, cluster, name string, v any) {
		rev++
		evs = append(evs, statemachine.Event{Source: src, Kind: kind, Cluster: cluster, Type: kv.WatchPut, Name: name, Value: v, Rev: rev, At: 1})
	}
	for i := range nodes {
		id := "n" + strconv.Itoa(i)
		ev(statemachine.ClusterNodesSource("default"), statemachine.KindStorageNodes, "default", id, models.StorageNode{NodeID: id, NodeAddress: "127.0.0.1:1"})
	}
	for d := range dbs {
		db := "db" + strconv.Itoa(d)
		ev(statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", db, benchDB(db))
		ev(statemachine.SourceAssign, statemachine.KindAssign, "", db, benchAssign(db, d, nodes))
		ev(statemachine.SourceShardState, statemachine.KindShardState, "", db, benchStates(db, d, nodes, 1))
		for s := range 4 {
			ev(statemachine.ClusterISRSource("default"), statemachine.KindISR, "default", models.ShardID(db, s),
				models.ISR{Leader: "n" + strconv.Itoa((d+s)%nodes), Term: 1, Replicas: []string{"n" + strconv.Itoa((d+s)%nodes)}})
		}
	}
	m.PublishNow(evs...)
	return m
}

func benchDB(db string) models.Database {
	return models.Database{Name: db, StorageCluster: "default", NumShards: 4, ReplicaFactor: 3}
}

func benchAssign(db string, d, nodes int) models.Assignment {
	a := models.Assignment{DB: db, Cluster: "default"}
	for s := range 4 {
		a.Shards = append(a.Shards, models.ShardAssignment{ID: s, Replicas: []string{
			"n" + strconv.Itoa((d+s)%nodes), "n" + strconv.Itoa((d+s+1)%nodes), "n" + strconv.Itoa((d+s+2)%nodes)}})
	}
	return a
}

func benchStates(db string, d, nodes int, term int64) models.ShardStates {
	ss := models.ShardStates{DB: db}
	for s := range 4 {
		ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: "n" + strconv.Itoa((d+s)%nodes), Term: term, Status: models.StatusOnline})
	}
	return ss
}

// BenchmarkApplyOneEvent applies one change per publication (the common
// case once the cluster is idle: every change is its own batch) to states of
// 100, 1,000 and 10,000 databases on 1,000 storage nodes. The cost per
// event must not grow with the state: O(change), not O(state).
func BenchmarkApplyOneEvent(b *testing.B) {
	const nodes = 1000
	for _, dbs := range []int{100, 1000, 10000} {
		m := populated(dbs, nodes)
		rev := int64(1 << 40)
		kinds := []struct {
			name string
			ev   func(i int) statemachine.Event
		}{
			{"database", func(i int) statemachine.Event {
				db := "db" + strconv.Itoa(i%dbs)
				return statemachine.Event{Source: statemachine.SourceDatabaseConfig, Kind: statemachine.KindDatabaseConfig, Name: db, Value: benchDB(db)}
			}},
			{"shard_state", func(i int) statemachine.Event {
				db := "db" + strconv.Itoa(i%dbs)
				return statemachine.Event{Source: statemachine.SourceShardState, Kind: statemachine.KindShardState, Name: db, Value: benchStates(db, i, nodes, int64(i))}
			}},
			{"node", func(i int) statemachine.Event {
				id := "n" + strconv.Itoa(i%nodes)
				return statemachine.Event{Source: statemachine.ClusterNodesSource("default"), Kind: statemachine.KindStorageNodes, Cluster: "default",
					Name: id, Value: models.StorageNode{NodeID: id, NodeAddress: "127.0.0.1:2"}}
			}},
			{"isr", func(i int) statemachine.Event {
				db := "db" + strconv.Itoa(i%dbs)
				return statemachine.Event{Source: statemachine.ClusterISRSource("default"), Kind: statemachine.KindISR, Cluster: "default",
					Name: models.ShardID(db, i%4), Value: models.ISR{Leader: "n1", Term: int64(i), Replicas: []string{"n1"}}}
			}},
		}
		for _, k := range kinds {
			evs := make([]statemachine.Event, 256)
			for i := range evs {
				evs[i] = k.ev(i * 7919)
				evs[i].Type = kv.WatchPut
				evs[i].At = 1
			}
			b.Run(fmt.Sprintf("dbs=%d/%s", dbs, k.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					ev := evs[i%len(evs)]
					rev++
					ev.Rev = rev
					m.PublishNow(ev)
				}
			})
		}
	}
}

// BenchmarkBackupWrite is one write of state.backup (snapshot of the raw
// keys on the consumer, JSON, fsync, rename) at 100, 1,000 and 10,000
// databases (4 shards each) on 1,000 nodes. The manager writes one at most
// every BackupWait (5s) and only after a change.
func BenchmarkBackupWrite(b *testing.B) {
	for _, dbs := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("dbs=%d", dbs), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "state.backup")
			m := statemachine.New(statemachine.Config{BackupPath: path})
			k := models.Keys{NS: "/cairn"}
			ck := models.ClusterKeys{SNS: "/cairn/storage/default"}
			main := statemachine.MainSources(nil, k)
			src := func(kind statemachine.Kind) statemachine.Source {
				for _, s := range main {
					if s.Kind == kind {
						return s
					}
				}
				return statemachine.ClusterSources(nil, "default", ck)[map[statemachine.Kind]int{statemachine.KindStorageNodes: 0, statemachine.KindISR: 1}[kind]]
			}
			rev := int64(0)
			rec := func(kind statemachine.Kind, key string, v any) {
				rev++
				data, err := json.Marshal(v)
				if err != nil {
					b.Fatal(err)
				}
				m.RecordRaw(src(kind), key, data, rev)
			}
			for i := range 1000 {
				id := "n" + strconv.Itoa(i)
				rec(statemachine.KindStorageNodes, ck.Node(id), models.StorageNode{NodeID: id, NodeAddress: "127.0.0.1:1"})
			}
			for d := range dbs {
				db := "db" + strconv.Itoa(d)
				rec(statemachine.KindDatabaseConfig, k.DatabaseConfig(db), benchDB(db))
				rec(statemachine.KindAssign, k.Assign(db), benchAssign(db, d, 1000))
				rec(statemachine.KindShardState, k.ShardState(db), benchStates(db, d, 1000, 1))
				for s := range 4 {
					rec(statemachine.KindISR, ck.ISR(db, s), models.ISR{Leader: "n1", Term: 1, Replicas: []string{"n1", "n2", "n3"}})
				}
			}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			n := 0
			for b.Loop() {
				if err := m.WriteBackupNow(); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/float64(max(n, 1)), "cpu_ms/op")
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Size()), "file_bytes")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
