package master_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

const (
	cluster  = "default"
	nodeTTL  = 10 * time.Second // long: tests end leases by revoking them
	waitFor  = 10 * time.Second
	pollTick = 2 * time.Millisecond
)

// harness is one control plane against a real embedded etcd: a state manager
// watching everything a master reads, fake storage nodes (leased records the
// test writes and revokes), a broker admin and the HTTP handler.
type harness struct {
	t     testing.TB
	etcd  *etcdtest.Member
	store kv.Store
	keys  models.Keys
	ck    models.ClusterKeys
	sm    *statemachine.Manager
	admin *meta.Admin
	http  http.Handler

	mu     sync.Mutex
	nodes  map[string]kv.LeaseID
	recs   map[string]models.StorageNode
	txn    map[string]map[string]uint64 // what each node answers at failover
	silent map[string]bool              // live nodes that refuse the failover question
	// hang: live nodes that answer no failover question before the
	// asker's deadline; old: nodes of an older release, without the
	// batched question (they refuse it with master.ErrNoBatch).
	hang, old map[string]bool
	// slow: live nodes that answer the batched question only after this
	// long (or fail at the asker's deadline, if sooner); left: for each
	// batched question, the time the asker left it (its deadline - now).
	slow map[string]time.Duration
	left map[string][]time.Duration
	// batches and perDB are the failover questions each node was asked,
	// batched (database -> shards) and per database.
	batches map[string][]map[string][]int
	perDB   map[string][]string
}

func logger(t testing.TB) *zap.Logger {
	if testing.Verbose() {
		return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	return zap.NewNop()
}

// newHarness starts etcd, configures the storage cluster "default" and
// registers the given storage nodes.
func newHarness(t testing.TB, nodes ...string) *harness {
	t.Helper()
	m := etcdtest.Start(t)
	h := &harness{t: t, etcd: m, store: m.Store(t), keys: models.Keys{NS: "/cairn"},
		nodes: map[string]kv.LeaseID{}, recs: map[string]models.StorageNode{}, txn: map[string]map[string]uint64{}, silent: map[string]bool{},
		hang: map[string]bool{}, old: map[string]bool{}, slow: map[string]time.Duration{}, left: map[string][]time.Duration{}, batches: map[string][]map[string][]int{}, perDB: map[string][]string{}}
	h.ck = models.ClusterKeys{SNS: h.keys.ClusterNamespace(models.StorageCluster{Name: cluster})}
	ctx := context.Background()
	_, err := h.store.Put(ctx, h.keys.StorageConfig(cluster),
		mustJSON(t, models.StorageCluster{Name: cluster, EtcdEndpoints: []string{}}), 0)
	require.NoError(t, err)
	h.sm = h.newManager()
	for _, id := range nodes {
		h.register(id, nil)
	}
	h.eventually("nodes registered and state loaded", func(st *statemachine.State) bool {
		return master.Ready(st) && st.Nodes.At(cluster).Len() == len(nodes)
	})
	h.admin = &meta.Admin{Store: h.store, Keys: h.keys, State: h.sm.Snapshot}
	h.http = web.New(web.Config{NodeID: "test", State: h.sm.Snapshot, Broker: adminOnly{h.admin}, Logger: logger(t)}).Handler()
	return h
}

// adminOnly is a broker role with the admin API alone (web.BrokerAPI).
type adminOnly struct{ admin *meta.Admin }

func (b adminOnly) Admin() web.Admin         { return b.admin }
func (b adminOnly) Data() web.Data           { return nil }
func (b adminOnly) Influx() web.InfluxRoutes { return nil }
func (b adminOnly) ReplicaTxn(context.Context, models.NodeRef, string, []int) (map[int]models.ReplicaTxn, error) {
	return nil, fmt.Errorf("the harness asks no storage node")
}

// operatorsView lists the operators persisted in the harness's etcd
// (web.MasterView).
type operatorsView struct{ h *harness }

func (v operatorsView) IsMaster() bool { return false }
func (v operatorsView) Operators(ctx context.Context) (models.OperatorList, error) {
	ops, _, err := master.ListOperators(ctx, v.h.store, v.h.keys)
	return models.OperatorList{Operators: ops}, err
}

// newManager starts a state manager (one per emulated process) watching the
// main sources and the default cluster's.
func (h *harness) newManager() *statemachine.Manager {
	sm := statemachine.New(statemachine.Config{Logger: logger(h.t)})
	sm.Start(context.Background())
	h.t.Cleanup(sm.Stop)
	for _, src := range statemachine.MainSources(h.store, h.keys) {
		sm.AddSource(src)
	}
	for _, src := range statemachine.ClusterSources(h.store, cluster, h.ck) {
		sm.AddSource(src)
	}
	return sm
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// register (re)creates a storage node's leased record under a fresh lease.
func (h *harness) register(id string, txn map[string]uint64) {
	h.t.Helper()
	ctx := context.Background()
	lease, err := h.store.Grant(ctx, nodeTTL)
	require.NoError(h.t, err)
	kctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	_, err = h.store.KeepAlive(kctx, lease)
	require.NoError(h.t, err)
	rec := models.StorageNode{NodeID: id, NodeAddress: id + ".test:1", Role: "storage", Cluster: cluster,
		LastUpdated: time.Now().UnixMicro()}
	_, err = h.store.Put(ctx, h.ck.Node(id), mustJSON(h.t, rec), lease)
	require.NoError(h.t, err)
	h.mu.Lock()
	h.nodes[id], h.recs[id], h.txn[id] = lease, rec, txn
	h.mu.Unlock()
}

// moveNode replaces a live node's record by one at address, under a new
// lease, in one write: its id registered again elsewhere (the old holder's
// lease gone) without the master seeing a gap.
func (h *harness) moveNode(id, address string) {
	h.t.Helper()
	ctx := context.Background()
	lease, err := h.store.Grant(ctx, nodeTTL)
	require.NoError(h.t, err)
	kctx, cancel := context.WithCancel(ctx)
	h.t.Cleanup(cancel)
	_, err = h.store.KeepAlive(kctx, lease)
	require.NoError(h.t, err)
	h.mu.Lock()
	rec := h.recs[id]
	rec.NodeAddress = address
	h.recs[id], h.nodes[id] = rec, lease
	h.mu.Unlock()
	_, err = h.store.Put(ctx, h.ck.Node(id), mustJSON(h.t, rec), lease)
	require.NoError(h.t, err)
}

// setTxn sets the last txn ids a node answers the master with at failover.
func (h *harness) setTxn(id string, txn map[string]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.txn[id] = txn
}

// askTxn answers the master's per-database failover question as the node
// would: the harness's live nodes answer, dead ones fail.
func (h *harness) askTxn(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	h.mu.Lock()
	h.perDB[node.NodeID] = append(h.perDB[node.NodeID], db)
	hang := h.hang[node.NodeID]
	h.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.answerLocked(node, db, shards)
}

// askTxns answers the master's batched failover question as the node
// would; a node of an older release refuses it.
func (h *harness) askTxns(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
	h.mu.Lock()
	h.batches[node.NodeID] = append(h.batches[node.NodeID], shards)
	if dl, ok := ctx.Deadline(); ok {
		h.left[node.NodeID] = append(h.left[node.NodeID], time.Until(dl))
	}
	hang, old, slow := h.hang[node.NodeID], h.old[node.NodeID], h.slow[node.NodeID]
	h.mu.Unlock()
	switch {
	case old:
		return nil, fmt.Errorf("%w: 404 from %s", master.ErrNoBatch, node.NodeID)
	case hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case slow > 0:
		select {
		case <-time.After(slow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[int]models.ReplicaTxn{}
	for db, ids := range shards {
		got, err := h.answerLocked(node, db, ids)
		if err != nil {
			return nil, err
		}
		out[db] = got
	}
	return out, nil
}

// answerLocked is a live node's answer about its shards of db; call with
// h.mu held.
func (h *harness) answerLocked(node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	id, _, _ := strings.Cut(node.Address, ".test:")
	if id != node.NodeID {
		return nil, fmt.Errorf("asked node %s at %s, the address of %s", node.NodeID, node.Address, id)
	}
	if _, ok := h.recs[id]; !ok || h.silent[id] {
		return nil, fmt.Errorf("node %s does not answer", id)
	}
	out := map[int]models.ReplicaTxn{}
	for _, s := range shards {
		sid := models.ShardID(db, s)
		term := uint64(max(h.recs[id].MaxTerm[sid], 1)) // the log's last term, as the record says
		out[s] = models.ReplicaTxn{LastTxnID: h.txn[id][sid], LastTerm: term}
	}
	return out, nil
}

// setMaxTerm rewrites a live node's record with the terms of its logs' last
// entries (max_term), as the storage host reports them.
func (h *harness) setMaxTerm(id string, terms map[string]int64) {
	h.t.Helper()
	h.mu.Lock()
	rec, lease := h.recs[id], h.nodes[id]
	rec.MaxTerm = terms
	h.recs[id] = rec
	h.mu.Unlock()
	_, err := h.store.Put(context.Background(), h.ck.Node(id), mustJSON(h.t, rec), lease)
	require.NoError(h.t, err)
}

// kill revokes a node's lease: its record vanishes at once, as when etcd
// expires the lease of a dead process.
func (h *harness) kill(id string) {
	h.t.Helper()
	h.mu.Lock()
	lease := h.nodes[id]
	delete(h.recs, id) // a dead node answers nothing
	h.mu.Unlock()
	require.NoError(h.t, h.store.Revoke(context.Background(), lease))
}

func (h *harness) writeISR(db string, shard int, set models.ISR) {
	h.t.Helper()
	_, err := h.store.Put(context.Background(), h.ck.ISR(db, shard), mustJSON(h.t, set), 0)
	require.NoError(h.t, err)
}

func (h *harness) eventually(what string, cond func(st *statemachine.State) bool) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return cond(h.sm.Snapshot()) }, waitFor, pollTick, what)
}

// runningMaster is one elected master term running in the background.
type runningMaster struct {
	*master.Master
	term     int64
	election *kv.Session // the lease the election key hangs on
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run returns
	err      error         // Run's result, set before done closes
}

type masterOpts struct {
	sm *statemachine.Manager // default: the harness's
	// shadow gives the master a separate, still-alive session for its own
	// liveness checks: it emulates a paused process that has not noticed
	// its election lease is gone.
	shadow bool
	// clusterID is the etcd cluster the term claims to be won in; 0: the
	// harness etcd's own.
	clusterID uint64
	metrics   *master.Metrics
	logger    *zap.Logger // default: logger(t)
	// rebalanceDelay defaults to an hour (no rebalancing in tests that do
	// not ask for it).
	rebalanceDelay time.Duration
	now            func() time.Time // the master's clock; default time.Now
	grace          time.Duration    // LivenessGrace; default none
	firstSets      bool             // Config.FirstSets
	// trustedAsk is Config.TrustedAskTimeout; default the AskTimeout
	// (500ms), so tests that read who answered what do not depend on the
	// machine's load; negative: the Config's own default (50ms).
	trustedAsk time.Duration
	// state replaces the manager's snapshots as what the master reads
	// (its wake-ups still come from sm).
	state func() *statemachine.State
	// resync is Config.Resync; default 200ms.
	resync time.Duration
}

// skewClock is a test clock that runs with real time plus an offset the
// test moves forward: delays of hours pass at once, while back-offs of
// milliseconds still elapse on their own.
type skewClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *skewClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// startMaster campaigns (blocking until elected) and runs a master term.
func (h *harness) startMaster(o masterOpts) *runningMaster {
	h.t.Helper()
	ctx := context.Background()
	if o.sm == nil {
		o.sm = h.sm
	}
	es, err := kv.NewSession(ctx, h.store, nodeTTL)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = es.Close(context.Background()) })
	session := es
	if o.shadow {
		session, err = kv.NewSession(ctx, h.store, nodeTTL)
		require.NoError(h.t, err)
		h.t.Cleanup(func() { _ = session.Close(context.Background()) })
	}
	el := kv.NewElection(h.store, h.keys.Master())
	term, err := el.Campaign(ctx, es, mustJSON(h.t, models.MasterRecord{NodeID: "m", ElectedAt: time.Now().UnixMilli()}))
	require.NoError(h.t, err)
	if o.clusterID == 0 {
		o.clusterID, err = h.store.ClusterID(ctx)
		require.NoError(h.t, err)
	}
	if o.logger == nil {
		o.logger = logger(h.t)
	}
	if o.rebalanceDelay == 0 {
		o.rebalanceDelay = time.Hour
	}
	if o.state == nil {
		o.state = o.sm.Snapshot
	}
	if o.resync == 0 {
		o.resync = 200 * time.Millisecond
	}
	switch {
	case o.trustedAsk == 0:
		o.trustedAsk = 500 * time.Millisecond
	case o.trustedAsk < 0:
		o.trustedAsk = 0
	}
	m := master.New(master.Config{Store: h.store, Keys: h.keys, Election: el, Term: term, Session: session,
		NodeID: "m", State: o.state, Changed: o.sm.Changed, Logger: o.logger,
		RebalanceDelay: o.rebalanceDelay, Resync: o.resync, ClusterID: o.clusterID, Now: o.now, LivenessGrace: o.grace, Metrics: o.metrics, AskTxn: h.askTxn, AskTxns: h.askTxns, FirstSets: o.firstSets,
		TrustedAskTimeout: o.trustedAsk})
	rm := &runningMaster{Master: m, term: term, election: es}
	rm.start()
	h.t.Cleanup(rm.stop)
	return rm
}

func (rm *runningMaster) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	rm.cancel, rm.done = cancel, done
	go func() {
		rm.err = rm.Run(ctx)
		close(done)
	}()
}

// wait returns Run's result once it has returned on its own.
func (rm *runningMaster) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-rm.done:
		return rm.err
	case <-time.After(waitFor):
		t.Fatalf("master term %d still running after %v", rm.term, waitFor)
		return nil
	}
}

// stop ends Run and waits for it; idempotent.
func (rm *runningMaster) stop() {
	rm.cancel()
	<-rm.done
}

// settle returns once the master has run a full reconcile pass over the
// state the manager holds now: Run serves operations between passes, so the
// second of two probes is answered after a pass that began after the first.
func (h *harness) settle(rm *runningMaster) {
	h.t.Helper()
	for range 2 {
		_, err := rm.Rebalance(context.Background(), true)
		require.NoError(h.t, err)
	}
}

// createDB creates a database through the HTTP API and waits until every
// shard is online.
func (h *harness) createDB(name string, shards, rf int) {
	h.t.Helper()
	code, body := h.do(http.MethodPost, "/api/v1/databases",
		map[string]any{"name": name, "num_shards": shards, "replica_factor": rf})
	require.Equal(h.t, http.StatusCreated, code, body)
	h.eventually("database "+name+" placed", func(st *statemachine.State) bool {
		return allOnline(st, name, shards)
	})
}

func allOnline(st *statemachine.State, db string, shards int) bool {
	ss := st.ShardStates.At(db)
	if len(st.Assignments.At(db).Shards) != shards || len(ss.Shards) != shards {
		return false
	}
	for _, s := range ss.Shards {
		if s.Status != models.StatusOnline {
			return false
		}
	}
	return true
}

// do sends a JSON request (body: a value to marshal, a raw string, or nil).
func (h *harness) do(method, path string, body any) (int, string) {
	h.t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		rd = bytes.NewReader(mustJSON(h.t, b))
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.http.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// shards reads GET /databases/{db}/shards.
func (h *harness) shards(db string) []models.ShardView {
	h.t.Helper()
	code, body := h.do(http.MethodGet, "/api/v1/databases/"+db+"/shards", nil)
	require.Equal(h.t, http.StatusOK, code, body)
	var out struct {
		Shards []models.ShardView `json:"shards"`
	}
	require.NoError(h.t, json.Unmarshal([]byte(body), &out))
	return out.Shards
}

// etcdStates reads a database's shard states straight from etcd.
func (h *harness) etcdStates(db string) models.ShardStates {
	h.t.Helper()
	kvp, err := h.store.Get(context.Background(), h.keys.ShardState(db))
	require.NoError(h.t, err)
	require.NotNil(h.t, kvp, "no shard state for %s", db)
	var ss models.ShardStates
	require.NoError(h.t, json.Unmarshal(kvp.Value, &ss))
	return ss
}

// counts returns replicas and leaders per node over every database, with
// every given node present (zero when it holds nothing).
func counts(st *statemachine.State, nodes []string) (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for _, n := range nodes {
		replicas[n], leaders[n] = 0, 0
	}
	for _, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			for _, r := range sh.Replicas {
				replicas[r]++
			}
		}
	}
	for _, ss := range st.ShardStates.All() {
		for _, s := range ss.Shards {
			if s.Status == models.StatusOnline {
				leaders[s.Leader]++
			}
		}
	}
	return replicas, leaders
}

// spread is max - min over the given nodes.
func spread(c map[string]int, nodes []string) int {
	vals := make([]int, 0, len(nodes))
	for _, n := range nodes {
		vals = append(vals, c[n])
	}
	sort.Ints(vals)
	return vals[len(vals)-1] - vals[0]
}

// collector gathers every value written under a prefix since revision 1.
type collector struct {
	store  kv.Store
	prefix string
	mu     sync.Mutex
	kvs    []kv.KeyValue
	rev    int64 // highest mod revision seen
}

func (h *harness) collect(prefix string) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{store: h.store, prefix: prefix}
	h.t.Cleanup(cancel)
	ch := h.store.Watch(ctx, prefix, 1)
	go func() {
		for r := range ch {
			c.mu.Lock()
			for _, ev := range r.Events {
				if ev.Type == kv.EventPut {
					c.kvs = append(c.kvs, ev.KV)
				}
				c.rev = max(c.rev, ev.KV.ModRev)
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// all waits until the collector has seen the latest write under its prefix
// and returns every value collected.
func (c *collector) all(t testing.TB) []kv.KeyValue {
	t.Helper()
	kvs, _, err := c.store.List(context.Background(), c.prefix)
	require.NoError(t, err)
	var want int64
	for _, kvp := range kvs {
		want = max(want, kvp.ModRev)
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rev >= want
	}, waitFor, pollTick, "watch reached revision %d", want)
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]kv.KeyValue(nil), c.kvs...)
}

// lastRev is the store's current revision.
func (h *harness) lastRev() int64 {
	h.t.Helper()
	_, rev, err := h.store.List(context.Background(), h.keys.NS+"/")
	require.NoError(h.t, err)
	return rev
}
