package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkWriteLocalHost is a standalone node's /write below HTTP with a
// real storage role: writers send 5,000-line batches of distinct series
// (loadgen's shape) through broker.Data.Write into a storage.Host leading
// the database's 8 shards alone (replica factor 1), its group commits,
// followers' wake-ups and flushes included: the path the +160k step of
// issue 21 measures, with a fixed number of points per run, so its
// cpu-ns/pt is a CPU cost the wall clock of a loaded node does not blur.
//
// CAIRN_BENCH_POINTS sets the points per run (default 4M),
// CAIRN_BENCH_SERIES the series (default 160k), CAIRN_BENCH_WRITERS the
// writers (default 32).
func BenchmarkWriteLocalHost(b *testing.B) {
	points, series, writers := envInt("CAIRN_BENCH_POINTS", 4_000_000), envInt("CAIRN_BENCH_SERIES", 160_000), envInt("CAIRN_BENCH_WRITERS", 32)
	b.Run(fmt.Sprintf("writers=%d/series=%d", writers, series), func(b *testing.B) {
		for b.Loop() {
			benchWriteHost(b, points, series, writers)
		}
	})
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// localHost is a standalone node's write path below HTTP: a storage.Host
// leading database db's shards alone (replica factor 1) in a real engine,
// and the broker's Data writing to it. Both stop with the test.
func localHost(tb testing.TB, db string, shards int) (*broker.Data, engine.Engine) {
	tb.Helper()
	eng, err := engine.NewBoltEngine(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	store := kv.NewMemoryStore()
	tb.Cleanup(func() { _ = store.Close() })
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	tb.Cleanup(sm.Stop)
	h := storage.NewHost(storage.HostConfig{NodeID: "self", Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/b/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		AckTimeout: 10 * time.Second, DropDelay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done; _ = eng.Close() })

	states := make([]models.ShardState, shards)
	assigned := make([]models.ShardAssignment, shards)
	for i := range states {
		states[i] = models.ShardState{ID: i, Leader: "self", Term: 1, Status: models.StatusOnline}
		assigned[i] = models.ShardAssignment{ID: i, Replicas: []string{"self"}}
	}
	cfg := models.Database{Name: db, StorageCluster: "default", NumShards: shards, ReplicaFactor: 1, UID: "u1"}
	for _, ev := range []statemachine.Event{
		{Source: statemachine.SourceStorageConfig, Kind: statemachine.KindStorageConfig, Name: "default", Value: models.StorageCluster{Name: "default"}},
		{Source: statemachine.SourceDatabaseConfig, Kind: statemachine.KindDatabaseConfig, Name: db, Value: cfg},
		{Source: statemachine.SourceAssign, Kind: statemachine.KindAssign, Name: db, Value: models.Assignment{DB: db, Cluster: "default", Shards: assigned}},
		{Source: statemachine.SourceShardState, Kind: statemachine.KindShardState, Name: db, Value: models.ShardStates{DB: db, Shards: states}},
	} {
		ev.Type = kv.WatchPut
		sm.Push(ev)
	}
	for _, src := range []string{statemachine.SourceAssign, statemachine.SourceDatabaseConfig} {
		sm.Push(statemachine.Event{Source: src, Type: kv.WatchSynced})
	}
	// The broker's own view: the same database, led here.
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{db: cfg}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{db: {DB: db, Shards: states}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"}}}),
	}
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Client: http.DefaultClient, WriteTimeout: 30 * time.Second, Self: "self", Local: h}
	// Every shard open and led before the clock starts.
	deadline := time.Now().Add(10 * time.Second)
	for shard := range shards {
		for h.Write(ctx, db, shard, 1, []lineproto.Point{{Metric: "warm", Field: "v", Value: 1, TS: 1}}) != nil {
			if time.Now().After(deadline) {
				tb.Fatalf("shard %d never took a write", shard)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	return d, eng
}

func benchWriteHost(b *testing.B, total, series, writers int) {
	const db, shards = "w1", 8
	d, _ := localHost(b, db, shards)
	perWriter := series / writers
	batches := total / scaleBatch / writers
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			prefixes := make([][]byte, perWriter)
			for i := range prefixes {
				h := w*perWriter + i
				prefixes[i] = fmt.Appendf(nil, "cpu,host=s%dh%d,region=r%d usage=1.5 ", w, h/5, h%5)
			}
			ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			body := make([]byte, 0, scaleBatch*48)
			next := 0
			for range batches {
				body = body[:0]
				for range scaleBatch {
					body = append(body, prefixes[next]...)
					body = strconv.AppendInt(body, ts, 10)
					body = append(body, '\n')
					if next++; next == len(prefixes) {
						next, ts = 0, ts+10_000
					}
				}
				if err := d.Write(context.Background(), db, "ms", body); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	runtime.ReadMemStats(&ms1)
	points := float64(batches * writers * scaleBatch)
	b.ReportMetric(float64(cpu.Nanoseconds())/points, "cpu-ns/pt")
	b.ReportMetric(float64(elapsed.Nanoseconds())/points, "wall-ns/pt")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/points, "allocs/pt")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/points, "B/pt")
}
