package storage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// pathCounter counts the requests a node's internal API serves, by route.
type pathCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pathCounter) middleware(c *gin.Context) {
	c.Next()
	p.mu.Lock()
	p.n[c.FullPath()]++
	p.mu.Unlock()
}

func (p *pathCounter) get(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[path]
}

// A follower of several shards led by one node pulls them all with one
// long-poll at a time: every acknowledged write of every shard reaches it,
// through the batched fetch only (no per-shard pulls), and while nothing is
// written each poll is parked at the leader instead of returning at once.
func TestBatchedFetchCoversEveryShardOfALeader(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()

	counts := &pathCounter{n: map[string]int{}}
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	lh := storage.NewHost(storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		LagBound: 2 * time.Second, AckTimeout: 5 * time.Second, DropDelay: time.Hour})
	r := gin.New()
	r.Use(counts.middleware)
	lh.Routes(r)
	srv := httptest.NewServer(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); lh.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		_ = eng.Close()
	})
	follower := startNode(t, "F", sm, store)

	const shards = 6
	var assign []models.ShardAssignment
	var states []models.ShardState
	for i := range shards {
		assign = append(assign, models.ShardAssignment{ID: i, Replicas: []string{"L", "F"}})
		states = append(states, models.ShardState{ID: i, Leader: "L", Term: 1, Status: models.StatusOnline})
	}
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", srv.Listener.Addr().String())
	live(t, store, "/t/storage/default", "F", follower.addr())
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: shards, ReplicaFactor: 2, UID: "u1"})
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", models.Assignment{DB: "d", Cluster: "default", Shards: assign})
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d", models.ShardStates{DB: "d", Shards: states})

	// Every shard's in-sync set holds F (no set was published before: all
	// replicas start in sync), so an acknowledged write is on F.
	for i := range shards {
		require.Eventually(t, func() bool { return len(isrOf(t, store, i)) == 2 }, 10*time.Second, 10*time.Millisecond)
	}
	// A follower may have asked before the leader took its role (a stale
	// term answer sends that shard through one per-shard pull, after which
	// it joins the batched fetch again). Once a first write of every shard
	// is on the follower, every shard is past that: from then on
	// everything goes through the batched fetch.
	for i := range shards {
		require.Eventually(t, func() bool { return lh.Write(ctx, "d", i, 1, points(100, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
	}
	for i := range shards {
		fs, err := follower.eng.Open("d", i)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fs.LastTxnID() == 1 }, 10*time.Second, 10*time.Millisecond)
	}
	solo := counts.get("/internal/v1/shards/:db/:shard/log")
	require.LessOrEqual(t, solo, shards)
	for round := range 3 {
		for i := range shards {
			require.Eventually(t, func() bool { return lh.Write(ctx, "d", i, 1, points(round*10, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
		}
	}
	for i := range shards {
		fs, err := follower.eng.Open("d", i)
		require.NoError(t, err)
		require.EqualValues(t, 4, fs.LastTxnID(), "shard %d: every acknowledged write is on the follower", i)
	}
	require.Equal(t, solo, counts.get("/internal/v1/shards/:db/:shard/log"), "no per-shard pulls")
	require.Positive(t, counts.get("/internal/v1/fetch"))

	// Idle, the session keeps polling (the leader hears from F) with the
	// batched fetch alone.
	before := counts.get("/internal/v1/fetch")
	require.Eventually(t, func() bool { return counts.get("/internal/v1/fetch") >= before+2 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, solo, counts.get("/internal/v1/shards/:db/:shard/log"))

	// The follower's own progress report through the txn question agrees.
	got, err := client.New(httpClient()).Txn(ctx, follower.addr(), "d", []int{0, 5})
	require.NoError(t, err)
	require.EqualValues(t, 4, got[0].LastTxnID)
	require.EqualValues(t, 4, got[5].LastTxnID)
}

func httpClient() *http.Client { return &http.Client{Timeout: 5 * time.Second} }
