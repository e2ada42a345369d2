package storage_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// startStoppable runs a host like startNodeWith, with a stop that ends it
// (the engine stays open: a restarted host over it is the same node back).
func startStoppable(t *testing.T, id string, sm *statemachine.Manager, store kv.Store, eng engine.Engine) (*node, func()) {
	h := storage.NewHost(storage.HostConfig{NodeID: id, Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		LagBound: 500 * time.Millisecond, AckTimeout: 5 * time.Second, DropDelay: time.Hour})
	r := gin.New()
	h.Routes(r)
	srv := httptest.NewServer(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return &node{id: id, host: h, eng: eng, srv: srv}, stop
}

// twoReplicas publishes one database "d" with one shard on L and F, led by L
// at term 1, with both nodes live (their records in the store, where storage
// nodes look for each other); f nil: F is not live yet.
func twoReplicas(t *testing.T, sm *statemachine.Manager, store kv.Store, l, f *node) {
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for _, n := range []*node{l, f} {
		if n != nil {
			live(t, store, "/t/storage/default", n.id, n.addr())
		}
	}
	publishShard(sm, []string{"L", "F"}, "L", 1)
}

// publishShard publishes database "d" with one shard on replicas, led by
// leader at term.
func publishShard(sm *statemachine.Manager, replicas []string, leader string, term int64) {
	publishDB(sm, "d", "u1", replicas, leader, term)
}

// publishDB publishes database db (uid) with one shard on replicas, led by
// leader at term.
func publishDB(sm *statemachine.Manager, db, uid string, replicas []string, leader string, term int64) {
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", db,
		models.Database{Name: db, StorageCluster: "default", NumShards: 1, ReplicaFactor: len(replicas), UID: uid})
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", db,
		models.Assignment{DB: db, Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: replicas}}})
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", db,
		models.ShardStates{DB: db, Shards: []models.ShardState{{ID: 0, Leader: leader, Term: term, Status: models.StatusOnline}}})
}

// isrOf reads the in-sync set of shard d/shard from the store (nil: none).
func isrOf(t *testing.T, store kv.Store, shard int) []string {
	kvp, err := store.Get(context.Background(), "/t/storage/default/isr/d/"+strconv.Itoa(shard))
	if err != nil || kvp == nil {
		return nil
	}
	var set models.ISR
	require.NoError(t, json.Unmarshal(kvp.Value, &set))
	return set.Replicas
}

func commits(t *testing.T, s engine.Shard) uint64 {
	c, ok := s.(engine.CommitCounter)
	require.True(t, ok)
	return c.LogCommits()
}

// insyncPair starts a leader L and a follower F of shard d/0 at term 1 and
// waits until the follower is in sync and a first write is acknowledged.
func insyncPair(t *testing.T) (leader, follower *node) {
	t.Helper()
	store, sm := memState(t)
	leader = startNode(t, "L", sm, store)
	follower = startNode(t, "F", sm, store)
	twoReplicas(t, sm, store, leader, follower)
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return leader.host.Write(context.Background(), "d", 0, 1, points(0, 1)) == nil
	}, 10*time.Second, 10*time.Millisecond)
	return leader, follower
}

// Concurrent writes to one shard share log commits (fsyncs) on the leader,
// and each is acknowledged only once the in-sync follower has it.
func TestConcurrentWritesShareFsyncs(t *testing.T) {
	leader, follower := insyncPair(t)
	ctx := context.Background()
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	before := commits(t, ls)

	const writers, each, size = 8, 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				errs <- leader.host.Write(ctx, "d", 0, 1, points(1+(w*each+i)*size, size))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n := commits(t, ls) - before
	t.Logf("%d batches in %d leader log commits", writers*each, n)
	require.Less(t, n, uint64(writers*each), "concurrent batches shared fsyncs")

	want := 1 + writers*each*size
	fs, err := follower.eng.Open("d", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fs.LastTxnID() == ls.LastTxnID() }, 10*time.Second, 10*time.Millisecond)
	for _, s := range []engine.Shard{ls, fs} {
		got, err := s.Query("cpu", nil, 0, int64(want))
		require.NoError(t, err)
		require.Len(t, got[0].Points, want)
	}
}

// The leader's log keeps what its followers may still fetch, not a fixed
// window: once the follower has the entries and they are flushed, they go
// (the retention bound here would keep 10,000). A follower that stops
// fetching leaves the in-sync set and holds nothing back; back again, it
// gets a snapshot (blocks and log tail), catches up and rejoins the set.
func TestLeaderLogTrimmedByFollowerProgress(t *testing.T) {
	store, sm := memState(t)
	// A flush before every commit: every entry but the newest is in blocks.
	leader := startNode(t, "L", sm, store, engine.WithFlushPoints(1), engine.WithRetainEntries(10000))
	feng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = feng.Close() })
	follower, stopF := startStoppable(t, "F", sm, store, feng)
	twoReplicas(t, sm, store, leader, follower)
	ctx := context.Background()
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return leader.host.Write(ctx, "d", 0, 1, points(0, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
	for i := 1; i < 20; i++ {
		require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(i*10, 10)))
	}
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	_, err = ls.Entries(10, 0)
	require.ErrorIs(t, err, engine.ErrCompacted, "entries the follower has and blocks hold are trimmed")
	es, err := ls.Entries(ls.LastTxnID()-1, 0)
	require.NoError(t, err)
	require.Len(t, es, 1, "the unflushed entry stays")

	// F stops: it leaves the in-sync set once it has not fetched for the
	// lag bound, and from then on holds nothing back.
	stopF()
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 1 }, 10*time.Second, 10*time.Millisecond)
	for i := 20; i < 30; i++ {
		require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(i*10, 10)))
	}
	fs, err := feng.Open("d", 0)
	require.NoError(t, err)
	_, err = ls.Entries(fs.LastTxnID(), 0)
	require.ErrorIs(t, err, engine.ErrCompacted, "the log did not wait for the stopped follower")

	// F comes back (a new address): a snapshot, then the log, then in sync.
	follower, _ = startStoppable(t, "F", sm, store, feng)
	put(sm, statemachine.ClusterNodesSource("default"), statemachine.KindStorageNodes, "default", "F",
		models.StorageNode{NodeID: "F", NodeAddress: follower.addr()})
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(300, 10)))
	require.Eventually(t, func() bool { return fs.LastTxnID() == ls.LastTxnID() }, 10*time.Second, 10*time.Millisecond)
	got, err := fs.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 310, "the follower holds every point")
	_, err = fs.Entries(0, 1)
	require.ErrorIs(t, err, engine.ErrCompacted, "the follower's log starts at the leader's snapshot")
}

// A write started in the caller's goroutine (Host.Start) is queued at once
// and its finish answers only once the in-sync follower has it too; one
// at another term, or of a shard not hosted, is refused by Start, with
// nothing queued.
func TestStartedWriteWaitsForTheInSyncSet(t *testing.T) {
	leader, follower := insyncPair(t)
	ctx := context.Background()
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	fs, err := follower.eng.Open("d", 0)
	require.NoError(t, err)

	var finishes []func(context.Context) error
	for i := range 4 {
		finish, err := leader.host.Start("d", 0, 1, points(1+i*10, 10))
		require.NoError(t, err)
		finishes = append(finishes, finish)
	}
	for _, finish := range finishes {
		require.NoError(t, finish(ctx))
	}
	require.EqualValues(t, 5, ls.LastTxnID(), "one txn per started write")
	require.EqualValues(t, 5, fs.LastTxnID(), "acknowledged only once the follower held it")
	got, err := fs.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 41)

	_, err = leader.host.Start("d", 0, 2, points(100, 1))
	require.ErrorIs(t, err, storage.ErrStaleTerm)
	_, err = leader.host.Start("d", 7, 1, points(100, 1))
	require.ErrorIs(t, err, storage.ErrNotHosted)
	require.EqualValues(t, 5, ls.LastTxnID(), "nothing queued by a refused start")
}
