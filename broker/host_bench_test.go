package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
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
	for shard := range shards {
		require.Eventually(tb, func() bool {
			return h.Write(ctx, db, shard, 1, []lineproto.Point{{Metric: "warm", Field: "v", Value: 1, TS: 1}}) == nil
		}, 10*time.Second, 5*time.Millisecond, "shard %d never took a write", shard)
	}

	return d, eng
}

func benchWriteHost(b *testing.B, total, series, writers int) {
	d, _ := localHost(b, "w1", 8)
	measureWrites(b, d, total, series, writers)
}
