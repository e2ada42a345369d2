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
	store, sm := memState(t)

	lh, addr, counts := countedLeader(t, sm, store, nil)
	ctx := context.Background()
	follower := startNode(t, "F", sm, store)

	const shards = 6
	ledByL(t, sm, store, shards, addr, follower.addr())

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
	// How many per-shard pulls that took depends on how long each leader
	// took to take its role (more than one a shard on a loaded machine);
	// what matters is that there are no more from here on.
	solo := counts.get("/internal/v1/shards/:db/:shard/log")
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
	got, err := client.New(httpClient()).Txn(ctx, follower.peer(), "d", []int{0, 5})
	require.NoError(t, err)
	require.EqualValues(t, 4, got[0].LastTxnID)
	require.EqualValues(t, 4, got[5].LastTxnID)
}

// countedLeader runs node "L" (LagBound 2 s) behind a router that counts
// the requests it serves by route, with refuse (if not nil) in front of its
// routes, and returns its address.
func countedLeader(t *testing.T, sm *statemachine.Manager, store kv.Store, refuse gin.HandlerFunc) (*storage.Host, string, *pathCounter) {
	counts := &pathCounter{n: map[string]int{}}
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	lh := storage.NewHost(storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		LagBound: 2 * time.Second, AckTimeout: 5 * time.Second, DropDelay: time.Hour})
	r := gin.New()
	r.Use(counts.middleware)
	if refuse != nil {
		r.Use(refuse)
	}
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
	return lh, srv.Listener.Addr().String(), counts
}

// ledByL publishes database d of shards shards, each replicated on L (at
// leader) and F (at follower), led by L at term 1.
func ledByL(t *testing.T, sm *statemachine.Manager, store kv.Store, shards int, leader, follower string) {
	var assign []models.ShardAssignment
	var states []models.ShardState
	for i := range shards {
		assign = append(assign, models.ShardAssignment{ID: i, Replicas: []string{"L", "F"}})
		states = append(states, models.ShardState{ID: i, Leader: "L", Term: 1, Status: models.StatusOnline})
	}
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", leader)
	live(t, store, "/t/storage/default", "F", follower)
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: shards, ReplicaFactor: 2, UID: "u1"})
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", models.Assignment{DB: "d", Cluster: "default", Shards: assign})
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d", models.ShardStates{DB: "d", Shards: states})
}

// A follower whose leader is of an older version without the batched fetch
// (its console answered the POST with 405) asks for it once, then follows
// every shard with per-shard pulls parked at the leader: every acknowledged
// write reaches it, its in-sync sets stay full while writes come and while
// idle (the in-sync flaps that stalled rolling upgrades), and it does not
// ask for the batched fetch again meanwhile.
func TestFollowerOfALeaderWithoutBatchedFetch(t *testing.T) {
	store, sm := memState(t)
	oldConsole := func(c *gin.Context) {
		if c.Request.URL.Path == "/internal/v1/fetch" {
			c.AbortWithStatus(http.StatusMethodNotAllowed)
		}
	}
	lh, addr, counts := countedLeader(t, sm, store, oldConsole)
	follower := startNode(t, "F", sm, store)
	const shards = 4
	ledByL(t, sm, store, shards, addr, follower.addr())
	ctx := context.Background()
	for i := range shards {
		require.Eventually(t, func() bool { return len(isrOf(t, store, i)) == 2 }, 10*time.Second, 10*time.Millisecond)
	}
	for round := range 5 {
		for i := range shards {
			require.Eventually(t, func() bool { return lh.Write(ctx, "d", i, 1, points(round*10, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
			require.Len(t, isrOf(t, store, i), 2, "shard %d: the follower stays in sync", i)
		}
	}
	for i := range shards {
		fs, err := follower.eng.Open("d", i)
		require.NoError(t, err)
		require.EqualValues(t, 5, fs.LastTxnID(), "shard %d: every acknowledged write is on the follower", i)
	}
	require.Positive(t, counts.get("/internal/v1/shards/:db/:shard/log"))
	asked := counts.get("/internal/v1/fetch")
	require.Positive(t, asked, "the batched fetch was asked for")
	require.Never(t, func() bool {
		for i := range shards {
			if len(isrOf(t, store, i)) != 2 {
				return true
			}
		}
		return counts.get("/internal/v1/fetch") != asked
	}, 5*time.Second, 50*time.Millisecond, "idle, the in-sync sets stay full and the batched fetch is not asked again")
}

func httpClient() *http.Client { return &http.Client{Timeout: 5 * time.Second} }
