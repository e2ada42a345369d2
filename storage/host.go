package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// HostConfig configures the shard host of a storage node.
type HostConfig struct {
	NodeID  string
	Cluster string
	Engine  engine.Engine
	Store   kv.Store // the storage cluster's etcd (in-sync sets)
	Keys    models.ClusterKeys
	State   func() *statemachine.State
	Changed func() <-chan struct{} // closed at the next state publication
	// Feed, when set, is shared with other hosts in this process and says
	// which databases changed (Changed is then unused); nil: the host runs
	// its own over State and Changed.
	Feed   *Feed
	Logger *zap.Logger
	// MinInsync is the fewest in-sync replicas a write needs; default 1.
	MinInsync int
	// LagBound: a follower that has not caught up for this long leaves the
	// in-sync set; default 2s.
	LagBound time.Duration
	// AckTimeout bounds how long a write waits for in-sync replicas; default 10s.
	AckTimeout time.Duration
	// FetchWait is how long this node's batched fetches stay parked at a
	// leader with nothing new (fetchsession.go), at first: a session whose
	// polls keep coming back empty parks longer (idleWait); default 10s.
	FetchWait time.Duration
	// DropDelay is how long a replica no longer assigned here keeps its data
	// before it is deleted: an emptied or replaced etcd (restored a moment
	// later) must not cost the data. Default 5m.
	DropDelay time.Duration
	// Dir holds the per-database incarnation marks (<db>.uid) next to the
	// engine's files; "" disables them.
	Dir string
	// Client sends requests to other storage nodes (the app's signing,
	// TLS-aware peer client); a plain pooled client when nil.
	Client *http.Client
	// QueryLimits bound every query this node answers (zero: unbounded);
	// a caller may ask for tighter ones.
	QueryLimits engine.Limits
	// Registerer, when set, gets the host's metrics (metrics.go).
	Registerer prometheus.Registerer
	// StateStore and StateKeys locate the master's shard states. When the
	// storage cluster's store is this same store (its etcd is the main one),
	// every in-sync set write is also fenced on the shard's state key
	// (isrwrite.go).
	StateStore kv.Store
	StateKeys  models.Keys
	// WriteFence, when set, is checked first by every write this node
	// leads: an error (DiskFence.Err) refuses it at once.
	WriteFence func() error
	// ExpireEvery is how often the blocks a database's retention expired
	// are deleted from this node's replicas (expire.go); default 1m.
	ExpireEvery time.Duration
	// MaxDiskPct, when above 0, is the share of the data disk past which
	// an expiry pass deletes the oldest blocks (pressure.go); DiskUsage
	// measures it (DiskUsedPct of the data dir).
	MaxDiskPct int
	DiskUsage  func() int
}

// Host opens and closes shard replicas as assignments change and serves the
// replication protocol: Shardz's serve / stop-serving hooks, level-triggered.
type Host struct {
	cfg     HostConfig
	leaving atomic.Bool // Handoff began: followers stop fetching (and so never re-enter an in-sync set they left)
	nodeID  string
	cluster string
	store   kv.Store
	ck      models.ClusterKeys
	state   func() *statemachine.State
	lg      *zap.Logger
	client  *http.Client
	metrics *metrics

	pressure atomic.Pointer[models.DiskPressure] // the last deletion under disk pressure (pressure.go)

	mu       sync.RWMutex
	replicas map[string]*replica
	// following moves after every change of what Following answers: a
	// replica opened or closed, a replica's role or leader (FollowingVersion).
	following atomic.Uint64

	unwanted map[string]time.Time // reconcile only: since when a replica is not assigned here
	retry    bool                 // reconcile only: something failed that only a full pass retries
	views    map[string]dbView    // reconcile only: per database, what the last pass derived
	want     map[string]desired   // reconcile only: the union of the views' replicas
	looked   atomic.Int64         // replicas reconcile passes looked at, for the cost test

	peersMu sync.Mutex
	peers   map[string]string    // node id -> address, learned on demand (peers.go)
	feed    atomic.Pointer[Feed] // the feed Run reads: what followers of a leader not live wait on

	recordRev atomic.Int64 // create revision of this node's record as this process holds it (0: unknown)
	// statesDecoded counts the shard-state records in-sync set writes
	// decoded themselves (statesAsRead), for the cost test.
	statesDecoded atomic.Int64
	// placedSets counts the first in-sync sets taken from the watched
	// state unread (placedSet).
	placedSets atomic.Int64

	waitMu  sync.Mutex
	waiters map[*replica]map[chan struct{}]int // parked batched fetches to wake at an append or role change of a replica
	created chan struct{}                      // closed when a replica is opened (signalCreated)

	sessMu   sync.Mutex
	sessions map[client.Peer]*fetchSession // follower side: one batched fetch loop per leader node
	// sessGen counts the sessions created; goneSeen is what the last
	// endSessionsGone looked at (sessMu).
	sessGen  uint64
	goneSeen goneCheck
	// noBatch: leader addresses that refused the batched fetch (a node of
	// an older version), until when their followers pull per shard.
	noBatch map[string]time.Time

	terms *termBook // the highest term each replica accepted, on disk (terms.go)

	isrBatch isrBatcher // in-sync set writes of leaders upkept at the same time (isrbatch.go)
}

// NewHost builds a host; Run drives it.
func NewHost(cfg HostConfig) *Host {
	if cfg.MinInsync == 0 {
		cfg.MinInsync = 1
	}
	if cfg.LagBound == 0 {
		cfg.LagBound = 2 * time.Second
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	if cfg.FetchWait == 0 {
		cfg.FetchWait = fetchWait
	}
	if cfg.DropDelay == 0 {
		cfg.DropDelay = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	h := &Host{cfg: cfg, nodeID: cfg.NodeID, cluster: cfg.Cluster, store: cfg.Store, ck: cfg.Keys, state: cfg.State,
		lg: cfg.Logger.Named("shards"), client: cfg.Client, replicas: map[string]*replica{},
		unwanted: map[string]time.Time{}, views: map[string]dbView{}, want: map[string]desired{},
		waiters: map[*replica]map[chan struct{}]int{}, created: make(chan struct{}), sessions: map[client.Peer]*fetchSession{}, noBatch: map[string]time.Time{}, peers: map[string]string{}, terms: newTermBook(cfg.Dir)}
	if cfg.Registerer != nil {
		h.metrics = newMetrics(h, cfg.Registerer)
	}
	return h
}

// SetRecordRev records the create revision of this node's record as this
// process registered it: in-sync set changes compare on it (isrwrite.go).
func (h *Host) SetRecordRev(rev int64) { h.recordRev.Store(rev) }

// Following gives the shard fields of the node record: the replicas open
// here and the leader each followed shard follows.
func (h *Host) Following() (int, map[string]string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	following := map[string]string{}
	for id, r := range h.replicas {
		r.mu.Lock()
		if r.want.role == roleFollower {
			following[id] = r.want.leader
		}
		r.mu.Unlock()
	}
	return len(h.replicas), following
}

// FollowingVersion moves after every change of what Following answers (the
// node record's ReportVersion): the record, looked at every second, builds
// the map of the node's followed shards again only when this moved.
func (h *Host) FollowingVersion() uint64 { return h.following.Load() }

// Attach sets the storage cluster's store once its config is known; call
// before Run.
func (h *Host) Attach(store kv.Store, ck models.ClusterKeys) {
	h.store, h.ck = store, ck
}

// fullEvery spaces the full reconcile passes when nothing needs retrying.
const fullEvery = 30 * time.Second

// Run reconciles replicas with the published state until ctx ends, then stops
// every replica (data stays on disk).
func (h *Host) Run(ctx context.Context) {
	feed := h.cfg.Feed
	if feed == nil {
		feed = NewFeed(h.state, h.cfg.Changed)
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); feed.Run(fctx) }()
		defer func() { stop(); <-done }()
	}
	h.feed.Store(feed)
	sub := feed.subscribe(h.nodeID)
	defer feed.unsubscribe(sub)
	pctx, stopPeers := context.WithCancel(ctx)
	peersDone := make(chan struct{})
	expireDone := make(chan struct{})
	go func() { defer close(peersDone); h.watchPeers(pctx, feed) }()
	go func() { defer close(expireDone); h.expireLoop(pctx) }()
	defer func() { stopPeers(); <-peersDone; <-expireDone }()
	t := time.NewTimer(fullEvery)
	defer t.Stop()
	full, lastFull := true, time.Now()
	for {
		all, names := sub.take()
		if full {
			lastFull = time.Now()
		}
		h.reconcile(full, all, names)
		full = false
		// A full pass retries failed opens and term records and drops
		// unwanted replicas whose drop delay ran: a second after the last
		// one while something is retried, at the first drop while replicas
		// age (at least a second after the last pass), else fullEvery after
		// it (the feed names every database a change touches, so it only
		// re-checks). Looking at every replica each second cost 11 % of a
		// 1,000-agent process, and a 1 s ticker that found nothing to do
		// still woke every idle node each second; so did ageing replicas
		// each second, for the whole drop delay, after every move. The
		// timer counts from the last full pass, so a stream of changes does
		// not put a retry off.
		next := fullEvery
		if h.retry {
			next = time.Second
		} else if drop, ok := h.firstDrop(); ok {
			next = min(next, max(time.Second, drop.Sub(lastFull)))
		}
		t.Reset(time.Until(lastFull.Add(next)))
		select {
		case <-ctx.Done():
			h.mu.Lock()
			reps := h.replicas
			h.replicas = map[string]*replica{}
			h.mu.Unlock()
			for _, r := range reps {
				r.stop()
			}
			return
		case <-sub.ch:
		case <-t.C:
			full = true
		}
	}
}

// firstDrop is when the first unwanted replica's drop delay runs out
// (false: none is unwanted). Call from Run only.
func (h *Host) firstDrop() (time.Time, bool) {
	var first time.Time
	for _, since := range h.unwanted {
		if at := since.Add(h.cfg.DropDelay); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// reconcile converges replicas to the snapshot: open what is assigned here,
// set each replica's role and term, close and drop what is not. It looks at
// the databases named (every one when all), and at every replica when full;
// otherwise only at the replicas of the databases that changed here (those
// they had and those they have), so one database's event costs its own
// replicas here, not every replica of the host.
func (h *Host) reconcile(full, all bool, names map[string]bool) {
	if full {
		h.retry = false // set again by what fails in this pass
	}
	st := h.state()
	want, touched, left := h.wanted(st, all, names)
	if !full && len(touched) == 0 {
		return // nothing this node hosts changed
	}
	wanted := func(yield func(string, desired) bool) {
		if full {
			for id, d := range want {
				if !yield(id, d) {
					return
				}
			}
			return
		}
		for name := range touched {
			for id, d := range h.views[name].want {
				if !yield(id, d) {
					return
				}
			}
		}
	}
	var roles []replicaRole
	for id, d := range wanted {
		h.looked.Add(1)
		delete(h.unwanted, id)
		h.mu.RLock()
		r := h.replicas[id]
		h.mu.RUnlock()
		db, shard, _ := models.ParseShardID(id)
		uid := st.Databases.At(db).UID
		if r != nil && r.uid != "" && uid != "" && r.uid != uid {
			// The database was dropped and created again while this replica
			// stayed open (within the drop delay, or both events seen as one
			// after a re-list): its data is the old incarnation's.
			if err := h.retire(r); err != nil {
				h.lg.Warn("cannot drop the data of an earlier incarnation", zap.String("shard", r.id), zap.Error(err))
			}
			r = nil
		}
		if r == nil {
			if err := h.checkIncarnation(db, uid); err != nil {
				h.lg.Error("cannot check database incarnation", zap.String("db", db), zap.Error(err))
				h.retry = true
				continue
			}
			s, err := h.cfg.Engine.Open(db, shard)
			if err != nil {
				h.lg.Error("cannot open shard", zap.String("shard", id), zap.Error(err))
				h.retry = true
				continue
			}
			r = newReplica(h, db, shard, s)
			r.uid = uid
			h.mu.Lock()
			h.replicas[id] = r
			h.mu.Unlock()
			h.signalCreated()
			h.following.Add(1)
			h.lg.Info("serving shard", zap.String("shard", id))
		}
		h.syncRollups(r, st.Databases.At(db))
		h.gatePacks(r, st, d.replicas)
		h.gateParts(r, st, d.replicas)
		roles = append(roles, replicaRole{r, d})
	}
	for _, rr := range h.admitTerms(st, roles) {
		rr.r.setDesired(rr.d)
	}
	// Replicas no longer assigned here stop serving at once; their data goes
	// only after DropDelay, and only on a state confirmed by etcd. A pass
	// that is not full looks only at the replicas its databases no longer
	// want here (left): the others' roles did not change, and a full pass
	// comes when the first drop delay runs out (Run).
	now := time.Now()
	confirmed := !st.FromBackup && st.Synced[statemachine.SourceAssign] && st.Synced[statemachine.SourceDatabaseConfig]
	hosted := func(yield func(string, *replica) bool) {
		if full {
			for id, r := range h.replicas {
				if !yield(id, r) {
					return
				}
			}
			return
		}
		for id := range left {
			if r := h.replicas[id]; r != nil && !yield(id, r) {
				return
			}
		}
	}
	h.mu.RLock()
	var idle, gone []*replica
	for id, r := range hosted {
		h.looked.Add(1)
		if _, ok := want[id]; ok {
			continue
		}
		idle = append(idle, r)
		since, seen := h.unwanted[id]
		if !seen {
			h.unwanted[id] = now
			h.lg.Info("shard no longer assigned here; data kept for the drop delay", zap.String("shard", id), zap.Duration("drop_delay", h.cfg.DropDelay))
		} else if confirmed && now.Sub(since) >= h.cfg.DropDelay {
			gone = append(gone, r)
		}
	}
	h.mu.RUnlock()
	for _, r := range idle {
		r.setDesired(desired{role: roleIdle})
	}
	for _, r := range gone {
		if err := h.retire(r); err != nil {
			h.lg.Warn("cannot drop shard data", zap.String("shard", r.id), zap.Error(err))
			continue
		}
		h.lg.Info("stopped serving shard; data dropped", zap.String("shard", r.id))
	}
}

// dbView is what reconcile last derived from one database's records: the
// records it read (by identity: a snapshot shares unchanged records, a
// changed one is decoded anew) and this node's replicas of it.
type dbView struct {
	assign  *models.ShardAssignment
	nAssign int
	states  *models.ShardState
	nStates int
	uid     string
	want    map[string]desired
}

func viewOf(a models.Assignment, ss models.ShardStates, uid string) dbView {
	v := dbView{nAssign: len(a.Shards), nStates: len(ss.Shards), uid: uid}
	if len(a.Shards) > 0 {
		v.assign = &a.Shards[0]
	}
	if len(ss.Shards) > 0 {
		v.states = &ss.Shards[0]
	}
	return v
}

func (v dbView) same(o dbView) bool {
	return v.assign == o.assign && v.nAssign == o.nAssign && v.states == o.states && v.nStates == o.nStates && v.uid == o.uid
}

// wanted is what the snapshot says this node hosts, the databases whose
// replicas here may have changed since the last call, and the replicas those
// databases wanted here before and no longer do. Only the databases
// named (every database when all) are looked at, and of those only the ones
// whose records changed are looked at shard by shard, so one event costs
// O(shards of the databases it touched). The returned map is kept between
// calls: read it only.
func (h *Host) wanted(st *statemachine.State, all bool, names map[string]bool) (map[string]desired, map[string]bool, map[string]bool) {
	var touched, left map[string]bool // allocated on first use: most passes touch nothing here
	touch := func(name string) {
		if touched == nil {
			touched = map[string]bool{}
		}
		touched[name] = true
	}
	drop := func(name string) {
		old, ok := h.views[name]
		if !ok {
			return
		}
		for id := range old.want {
			delete(h.want, id)
			if left == nil {
				left = map[string]bool{}
			}
			left[id] = true
		}
		if len(old.want) > 0 {
			touch(name)
		}
		delete(h.views, name)
	}
	look := func(name string) {
		a, ok := st.Assignments.Get(name)
		db, dbOK := st.Databases.Get(name)
		if !ok || a.Cluster != h.cluster || !dbOK {
			drop(name)
			return
		}
		v := viewOf(a, st.ShardStates.At(name), db.UID)
		if old, seen := h.views[name]; seen && old.same(v) {
			return
		}
		drop(name)
		v.want = h.wantedIn(st, name, a, db.UID)
		h.views[name] = v
		for id, d := range v.want {
			h.want[id] = d
			delete(left, id)
		}
		if len(v.want) > 0 {
			touch(name)
		}
	}
	if all {
		for name := range st.Assignments.All() {
			look(name)
		}
		for name := range h.views {
			if !st.Assignments.Has(name) {
				drop(name)
			}
		}
		return h.want, touched, left
	}
	for name := range names {
		look(name)
	}
	return h.want, touched, left
}

// wantedIn is this node's replicas of one database and what each should be.
// States written for another incarnation of the database (uid) give no role:
// acting on them would raise the new incarnation's seen terms to the old one's.
func (h *Host) wantedIn(st *statemachine.State, name string, a models.Assignment, uid string) map[string]desired {
	var want map[string]desired
	ss := st.ShardStates.At(name)
	current := ss.UID == "" || uid == "" || ss.UID == uid
	for _, sh := range a.Shards {
		if !slices.Contains(sh.Replicas, h.nodeID) {
			continue
		}
		d := desired{role: roleIdle, replicas: sh.Replicas}
		if s, ok := st.ShardState(name, sh.ID); ok && current && s.Status == models.StatusOnline {
			d.term = s.Term
			if s.Leader == h.nodeID {
				d.role = roleLeader
			} else {
				// The leader's address is looked up when following starts
				// (peers.go).
				d.role, d.leader = roleFollower, s.Leader
			}
		}
		if want == nil {
			want = map[string]desired{}
		}
		want[models.ShardID(name, sh.ID)] = d
	}
	return want
}

// checkIncarnation makes sure shard files on disk belong to this incarnation
// of db: files left by a dropped database of the same name are deleted first.
func (h *Host) checkIncarnation(db, uid string) error {
	if h.cfg.Dir == "" || uid == "" {
		return nil
	}
	mark := filepath.Join(h.cfg.Dir, db+".uid")
	old, err := os.ReadFile(mark)
	if err == nil && string(old) == uid {
		return nil
	}
	if err == nil {
		if err := h.terms.forget(db); err != nil {
			return err
		}
		h.mu.RLock()
		var stale []*replica
		for _, r := range h.replicas {
			if r.db == db {
				stale = append(stale, r)
			}
		}
		h.mu.RUnlock()
		for _, r := range stale {
			_ = h.retire(r) // the directory goes below in any case
		}
		if err := os.RemoveAll(filepath.Join(h.cfg.Dir, db)); err != nil {
			return err
		}
		h.lg.Info("removed shard data of an earlier database with the same name", zap.String("db", db))
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(h.cfg.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(mark, []byte(uid), 0o644)
}

// retire stops a replica and drops its data: one no longer assigned here
// past the drop delay, or one of an earlier incarnation of its database
// (which belongs to no database that exists).
func (h *Host) retire(r *replica) error {
	h.mu.Lock()
	if h.replicas[r.id] == r {
		delete(h.replicas, r.id)
	}
	h.mu.Unlock()
	h.following.Add(1)
	delete(h.unwanted, r.id)
	r.stop()
	return h.cfg.Engine.Drop(r.db, r.shard)
}

func (h *Host) get(db string, shard int) *replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.replicas[models.ShardID(db, shard)]
}

// Write appends points to a shard this node leads at term: the in-process
// path for a broker in the same process as the leader.
func (h *Host) Write(ctx context.Context, db string, shard int, term int64, points []lineproto.Point) error {
	return h.write(ctx, db, shard, term, points, nil)
}

// Delete logs d on a shard this node leads at term, replicated like a write:
// nil once it is durable on the in-sync replicas.
func (h *Host) Delete(ctx context.Context, db string, shard int, term int64, d *wire.Delete) error {
	r, err := h.hosted(db, shard)
	if err != nil {
		return err
	}
	return r.delete(ctx, term, d)
}

// Prepare does ahead what a write of points does first (engine.Prepare) and
// returns that write, to call once: a broker in this process calls it in
// the goroutine that split a batch by shard, while the points are in its
// CPU's caches.
func (h *Host) Prepare(points []lineproto.Point) func(ctx context.Context, db string, shard int, term int64) error {
	pre := engine.Prepare(points)
	return func(ctx context.Context, db string, shard int, term int64) error {
		return h.write(ctx, db, shard, term, points, pre)
	}
}

// Start does a write of points to a shard this node leads at term up to
// its place in the shard's log queue (its checks, encoding and queueing),
// in the caller's goroutine, and returns the rest: finish waits until the
// points are durable on every in-sync replica, with Write's answer. A
// broker in this process starts every local shard of a batch this way and
// then waits for them in turn, instead of handing each shard's write to a
// goroutine of its own. An error is Write's for points never queued.
func (h *Host) Start(db string, shard int, term int64, points []lineproto.Point) (finish func(ctx context.Context) error, err error) {
	r, err := h.hosted(db, shard)
	if err != nil {
		return nil, err
	}
	return r.startWrite(term, points, engine.Prepare(points))
}

// hosted is the replica of db's shard here, or ErrNotHosted.
func (h *Host) hosted(db string, shard int) (*replica, error) {
	if r := h.get(db, shard); r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("%w: %s on %s", ErrNotHosted, models.ShardID(db, shard), h.nodeID)
}

func (h *Host) write(ctx context.Context, db string, shard int, term int64, points []lineproto.Point, pre *engine.Prepared) error {
	r, err := h.hosted(db, shard)
	if err != nil {
		return err
	}
	return r.write(ctx, term, points, pre)
}

// Report gives the per-shard fields of the node record: last txn id of every
// replica and the leader each follower follows.
func (h *Host) Report() (map[string]uint64, map[string]string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	last := make(map[string]uint64, len(h.replicas))
	following := map[string]string{}
	for id, r := range h.replicas {
		last[id] = r.eng.LastTxnID()
		r.mu.Lock()
		if r.want.role == roleFollower {
			following[id] = r.want.leader
		}
		r.mu.Unlock()
	}
	return last, following
}

// SeenTerms gives the highest term every open replica accepted, for the node
// record's seen_term.
func (h *Host) SeenTerms() map[string]int64 {
	h.mu.RLock()
	ids := make([]string, 0, len(h.replicas))
	for id := range h.replicas {
		ids = append(ids, id)
	}
	h.mu.RUnlock()
	return h.terms.snapshot(ids)
}

// MaxTerms gives the term of the last entry of every replica's log, for the
// node record's max_term.
func (h *Host) MaxTerms() map[string]int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make(map[string]int64, len(h.replicas))
	for id, r := range h.replicas {
		out[id] = int64(r.eng.LastTerm())
	}
	return out
}

// Hosted counts the replicas this node has open.
func (h *Host) Hosted() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.replicas)
}
