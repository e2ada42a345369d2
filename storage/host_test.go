package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// node is one in-process storage host with its replication API on a
// loopback HTTP server.
type node struct {
	id   string
	host *storage.Host
	eng  engine.Engine
	srv  *httptest.Server
}

// peer is n as a caller knows it from its record.
func (n *node) peer() client.Peer { return client.Peer{ID: n.id, Address: n.addr()} }

func startNode(t *testing.T, id string, sm *statemachine.Manager, store kv.Store, opts ...engine.Option) *node {
	eng, err := engine.NewBoltEngine(t.TempDir(), opts...)
	require.NoError(t, err)
	return startNodeWith(t, id, sm, store, eng)
}

// startNodeWith runs a host over an engine the test prepared.
func startNodeWith(t *testing.T, id string, sm *statemachine.Manager, store kv.Store, eng engine.Engine) *node {
	n, _ := runNode(t, id, "", sm, store, eng)
	return n
}

// runNode runs a host over eng, keeping its incarnation marks and seen terms
// in dir ("": in memory), and returns a stop that ends it at once: client
// connections cut, host stopped, engine closed; its lease record stays, as
// after kill -9. The test's cleanup stops it too. mw run before its handlers.
func runNode(t *testing.T, id, dir string, sm *statemachine.Manager, store kv.Store, eng engine.Engine, mw ...gin.HandlerFunc) (*node, func()) {
	return runHost(t, hostConfig(id, dir, sm, store, eng), mw...)
}

// hostConfig is the configuration runNode runs a host with.
func hostConfig(id, dir string, sm *statemachine.Manager, store kv.Store, eng engine.Engine) storage.HostConfig {
	return storage.HostConfig{NodeID: id, Cluster: "default", Engine: eng, Store: store, Dir: dir,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		LagBound: 500 * time.Millisecond, AckTimeout: 5 * time.Second, DropDelay: time.Hour, FetchWait: 2 * time.Second}
}

// runHost is runNode with the host's configuration given.
func runHost(t *testing.T, cfg storage.HostConfig, mw ...gin.HandlerFunc) (*node, func()) {
	id, eng := cfg.NodeID, cfg.Engine
	h := storage.NewHost(cfg)
	r := gin.New()
	r.Use(mw...)
	h.Routes(r)
	srv := httptest.NewServer(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.CloseClientConnections()
			srv.Close()
			cancel()
			<-done
			_ = eng.Close()
		})
	}
	t.Cleanup(stop)
	return &node{id: id, host: h, eng: eng, srv: srv}, stop
}

func (n *node) addr() string { return n.srv.Listener.Addr().String() }

func put(sm *statemachine.Manager, source string, kind statemachine.Kind, cluster, name string, v any) {
	sm.Push(statemachine.Event{Source: source, Kind: kind, Cluster: cluster, Type: kv.WatchPut, Name: name, Value: v})
}

// live writes a node's record where storage nodes read it: they do not
// watch each other, they ask for the records they need.
func live(t *testing.T, store kv.Store, sns, id, addr string) {
	b, err := json.Marshal(models.StorageNode{NodeID: id, NodeAddress: addr})
	require.NoError(t, err)
	_, err = store.Put(context.Background(), models.ClusterKeys{SNS: sns}.Node(id), b, 0)
	require.NoError(t, err)
}

// leaderHost is node L's host on store, its in-sync writes fenced on the
// database states in the same etcd, following sm, with L and the nodes
// others live (at 127.0.0.1:2, :3, ...): the setup of the tests of a
// leader's fenced in-sync set writes. Its engine closes when the test ends,
// after the test's own deferred calls (stop Run there).
func leaderHost(t *testing.T, store kv.Store, sm *statemachine.Manager, ck models.ClusterKeys, keys models.Keys, others ...string) *storage.Host {
	t.Helper()
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close() })
	return leaderHostOn(t, eng, store, sm, ck, keys, others...)
}

// leaderHostOn is leaderHost on an engine of the test's own.
func leaderHostOn(t *testing.T, eng engine.Engine, store kv.Store, sm *statemachine.Manager, ck models.ClusterKeys, keys models.Keys, others ...string) *storage.Host {
	t.Helper()
	h := storage.NewHost(storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store, Keys: ck,
		State: sm.Snapshot, Changed: sm.Changed, Logger: zap.NewNop(), LagBound: time.Hour, DropDelay: time.Hour,
		StateStore: store, StateKeys: keys})
	live(t, store, ck.SNS, "L", "127.0.0.1:1")
	for i, id := range others {
		live(t, store, ck.SNS, id, fmt.Sprintf("127.0.0.1:%d", i+2))
	}
	rec, err := store.Get(context.Background(), ck.Node("L"))
	require.NoError(t, err)
	h.SetRecordRev(rec.CreateRev)
	return h
}

func points(from, n int) []lineproto.Point {
	out := make([]lineproto.Point, n)
	for i := range out {
		out[i] = lineproto.Point{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "a"}}, Field: "value",
			Value: float64(from + i), TS: int64(from + i)}
	}
	return out
}

// A follower that joins after the leader's log was trimmed gets a full sync,
// catches up, enters the in-sync set, and from then on every acknowledged
// write is on it.
func TestFollowerFullSyncThenInSync(t *testing.T) {
	store, sm := memState(t)

	// Flushing every batch lets the leader trim its log to the last 5 entries.
	leader := startNode(t, "L", sm, store, engine.WithRetainEntries(5), engine.WithFlushPoints(1))
	twoReplicas(t, sm, store, leader, nil) // F is not live yet

	ctx := context.Background()
	// F is not live yet: L leads alone and acknowledges on its own.
	require.Eventually(t, func() bool { return leader.host.Write(ctx, "d", 0, 1, points(0, 10)) == nil }, 5*time.Second, 10*time.Millisecond)
	for i := 1; i < 20; i++ {
		require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(i*10, 10)))
	}
	require.ErrorIs(t, leader.host.Write(ctx, "d", 0, 2, points(0, 1)), storage.ErrStaleTerm, "a write at another term is refused")
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	_, err = ls.Entries(0, 1)
	require.ErrorIs(t, err, engine.ErrCompacted, "the leader trimmed its log")

	follower := startNode(t, "F", sm, store)
	// F comes up: its log is empty and L trimmed most of its own, so F must
	// restore a snapshot, then follow, then be added to the in-sync set.
	live(t, store, "/t/storage/default", "F", follower.addr())
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 20*time.Millisecond)

	// Now a write is acknowledged only once F has it.
	require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(200, 10)))
	var fs engine.Shard
	fs, err = follower.eng.Open("d", 0)
	require.NoError(t, err)
	series, err := fs.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	require.Len(t, series, 1)
	require.Len(t, series[0].Points, 210, "the follower holds every acknowledged point")
	_, err = fs.Entries(0, 1)
	require.ErrorIs(t, err, engine.ErrCompacted, "the follower's log starts at the snapshot: it was fully synced, not replayed")
	last, following := follower.host.Report()
	require.EqualValues(t, 21, last["d/0"])
	require.Equal(t, "L", following["d/0"])

	// The master's failover question, through the follower's internal API:
	// its last txn id and terms, hosted shards only.
	got, err := client.New(http.DefaultClient).Txn(ctx, follower.peer(), "d", []int{0, 7})
	require.NoError(t, err)
	require.Equal(t, map[int]models.ReplicaTxn{0: {LastTxnID: 21, LastTerm: 1, Term: 1, SeenTerm: 1}}, got)
	_, err = client.New(http.DefaultClient).Txn(ctx, follower.peer(), "bad name!", []int{0})
	require.ErrorIs(t, err, models.ErrBadInput, "a bad question is refused with bad_request")
}

// A replica whose log diverged from the new leader's (entries of an old term
// that were never acknowledged) truncates its tail back to the last entry
// both logs share and then takes the leader's entries: its data equals the
// leader's afterwards.
func TestDivergentTailTruncated(t *testing.T) {
	store, sm := memState(t)

	// Both hold txns 1-3 of term 1. The new leader L then wrote 4-6 at term
	// 2; F still holds 4-5 of term 1, which nobody acknowledged.
	leaderEng := engineWith(t, logEntry(1, 1, 0), logEntry(2, 1, 10), logEntry(3, 1, 20), logEntry(4, 2, 30), logEntry(5, 2, 40), logEntry(6, 2, 50))
	followerEng := engineWith(t, logEntry(1, 1, 0), logEntry(2, 1, 10), logEntry(3, 1, 20), logEntry(4, 1, 100), logEntry(5, 1, 110))

	leader := startNodeWith(t, "L", sm, store, leaderEng)
	follower := startNodeWith(t, "F", sm, store, followerEng)
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for _, n := range []*node{leader, follower} {
		live(t, store, "/t/storage/default", n.id, n.addr())
	}
	publishShard(sm, []string{"L", "F"}, "L", 2)

	fs, err := followerEng.Open("d", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fs.LastTxnID() == 6 && fs.LastTerm() == 2 }, 10*time.Second, 10*time.Millisecond)
	for txn := uint64(1); txn <= 6; txn++ {
		want := uint64(1)
		if txn > 3 {
			want = 2
		}
		term, err := fs.TermAt(txn)
		require.NoError(t, err)
		require.Equal(t, want, term, "txn %d", txn)
	}
	ls, err := leaderEng.Open("d", 0)
	require.NoError(t, err)
	got, err := fs.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	want, err := ls.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, want, got, "the follower's data equals the leader's; the divergent points are gone")
	require.NoError(t, leader.host.Write(context.Background(), "d", 0, 2, points(60, 5)))
}

// A follower holding entries of the leader's own term beyond the leader's log
// (what a stale copy of the leader's data dir, leading under its node id at
// its term, meets) is never truncated: the leader fences its leadership
// (ErrFenced, answered as a stale term): its fetches and writes fail until the
// term changes.
func TestFollowerAheadInLeadersTermFences(t *testing.T) {
	store, sm := memState(t)

	// L (the stale copy) holds txns 1-3 of term 2; F also 4-5 of term 2,
	// which only a leader of term 2 can have written.
	leaderEng := engineWith(t, logEntry(1, 2, 0), logEntry(2, 2, 10), logEntry(3, 2, 20))
	followerEng := engineWith(t, logEntry(1, 2, 0), logEntry(2, 2, 10), logEntry(3, 2, 20), logEntry(4, 2, 30), logEntry(5, 2, 40))

	leader := startNodeWith(t, "L", sm, store, leaderEng)
	follower := startNodeWith(t, "F", sm, store, followerEng)
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for _, n := range []*node{leader, follower} {
		live(t, store, "/t/storage/default", n.id, n.addr())
	}
	publishShard(sm, []string{"L", "F"}, "L", 2)

	// L leads once its in-sync set is published (before, every request to
	// it is refused as a stale term, fenced or not).
	require.Eventually(t, func() bool {
		kvp, err := store.Get(context.Background(), "/t/storage/default/isr/d/0")
		return err == nil && kvp != nil
	}, 10*time.Second, 10*time.Millisecond, "L publishes its in-sync set")
	// F's own fetches fence L; a fetch like F's, through the API, is refused.
	fetch := func() int {
		resp, err := http.Get("http://" + leader.addr() + "/internal/v1/shards/d/0/log?term=2&node=F&after=5&after_term=2")
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return fetch() == http.StatusConflict }, 10*time.Second, 10*time.Millisecond)
	err := leader.host.Write(context.Background(), "d", 0, 2, points(60, 5))
	require.ErrorIs(t, err, storage.ErrFenced)
	status, code := models.StatusOf(err)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "stale_term", code)

	fs, err := followerEng.Open("d", 0)
	require.NoError(t, err)
	require.Equal(t, uint64(5), fs.LastTxnID(), "the follower keeps its entries of term 2")
	term, err := fs.TermAt(5)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	ls, err := leaderEng.Open("d", 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), ls.LastTxnID(), "the fenced leader wrote nothing")

	// A new term (the master moved on, F leads) lifts it: L follows and
	// catches up from F.
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "F", Term: 3, Status: models.StatusOnline}}})
	require.Eventually(t, func() bool { return ls.LastTxnID() == 5 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, follower.host.Write(context.Background(), "d", 0, 3, points(70, 5)))
}

// A replica whose log holds a newer term than the leadership it is told to
// follow (a restored etcd published an old state) never takes that leader's
// log: it would truncate entries that may be acknowledged. Once the master
// publishes a term above its log, with it as leader, the old leader catches
// up from it instead, and nothing of term 3 is lost.
func TestFollowerNeverTruncatesForAnOlderLeadership(t *testing.T) {
	store, sm := memState(t)

	// F holds txns 4-5 of term 3 (acknowledged while L was away); L stopped
	// at txn 3 of term 1.
	oldEng := engineWith(t, logEntry(1, 1, 0), logEntry(2, 1, 10), logEntry(3, 1, 20))
	newEng := engineWith(t, logEntry(1, 1, 0), logEntry(2, 1, 10), logEntry(3, 1, 20), logEntry(4, 3, 30), logEntry(5, 3, 40))
	old := startNodeWith(t, "L", sm, store, oldEng)
	up := startNodeWith(t, "F", sm, store, newEng)
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for _, n := range []*node{old, up} {
		live(t, store, "/t/storage/default", n.id, n.addr())
	}
	// The restored state: L leads at term 2.
	publishShard(sm, []string{"L", "F"}, "L", 2)

	ctx := context.Background()
	require.Eventually(t, func() bool {
		kvp, err := store.Get(ctx, "/t/storage/default/isr/d/0")
		return err == nil && kvp != nil
	}, 10*time.Second, 10*time.Millisecond, "L leads at term 2")
	fs, err := newEng.Open("d", 0)
	require.NoError(t, err)
	require.Never(t, func() bool { return fs.LastTxnID() != 5 || fs.LastTerm() != 3 }, 1500*time.Millisecond, 20*time.Millisecond,
		"F truncated its term-3 entries to follow a term-2 leader")

	// The master raises the term above F's log, with F (the newest log) as leader.
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "F", Term: 4, Status: models.StatusOnline}}})
	ls, err := oldEng.Open("d", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ls.LastTxnID() == 5 && ls.LastTerm() == 3 }, 10*time.Second, 10*time.Millisecond)
	got, err := ls.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	want, err := fs.Query("cpu", nil, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, want, got, "the old leader took the newer log")
	require.Len(t, want[0].Points, 25)
}

// An in-sync set restored from another etcd cluster is not taken over by the
// restored state's leader at its term (it may be a replica that fell behind
// since the backup, and would acknowledge writes alone): it leads only once
// the master publishes a newer term, and its set then names this cluster.
func TestRestoredInSyncSetNotTakenOverAtItsTerm(t *testing.T) {
	store, sm := memState(t)
	ctx := context.Background()
	cid, err := store.ClusterID(ctx)
	require.NoError(t, err)
	key := "/t/storage/default/isr/d/0"
	restored, err := json.Marshal(models.ISR{Leader: "F", Term: 2, Replicas: []string{"L", "F"}, ClusterID: cid + 1})
	require.NoError(t, err)
	_, err = store.Put(ctx, key, restored, 0)
	require.NoError(t, err)

	l := startNode(t, "L", sm, store)
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", l.addr())
	publishShard(sm, []string{"L", "F"}, "L", 2)

	require.Never(t, func() bool { return l.host.Write(ctx, "d", 0, 2, points(0, 1)) == nil }, time.Second, 20*time.Millisecond,
		"the restored state's leader acknowledged a write at the restored term")
	kvp, err := store.Get(ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, string(restored), string(kvp.Value), "the restored set was overwritten at its own term")

	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 3, Status: models.StatusOnline}}})
	require.Eventually(t, func() bool { return l.host.Write(ctx, "d", 0, 3, points(0, 1)) == nil }, 10*time.Second, 20*time.Millisecond)
	kvp, err = store.Get(ctx, key)
	require.NoError(t, err)
	var set models.ISR
	require.NoError(t, json.Unmarshal(kvp.Value, &set))
	require.Equal(t, int64(3), set.Term)
	require.Equal(t, cid, set.ClusterID)
}

// engineWith is a bolt engine in a temp dir whose shard d/0 holds entries.
func engineWith(t *testing.T, entries ...engine.Entry) engine.Engine {
	t.Helper()
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	s, err := eng.Open("d", 0)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, s.Apply(e))
	}
	return eng
}

// logEntry is entry txn of term holding 5 points from ts from.
func logEntry(txn, term uint64, from int) engine.Entry {
	return engine.Entry{TxnID: txn, Term: term, Points: points(from, 5)}
}

// memState is the shared setup of the tests that run hosts without etcd: a
// memory store and a started state manager, both closed when the test ends,
// after every node the test started (cleanups run last registered first).
func memState(t *testing.T) (*kv.MemoryStore, *statemachine.Manager) {
	t.Helper()
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	t.Cleanup(sm.Stop)
	return store, sm
}
