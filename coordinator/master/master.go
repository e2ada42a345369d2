package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cairn-db/cairn/internal/logrepeat"
	"math/rand/v2"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/verify"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// Config of one term of mastership.
type Config struct {
	Store    kv.Store
	Keys     models.Keys
	Election *kv.Election
	Term     int64
	Session  *kv.Session // the master's lease: failover locks are bound to it
	NodeID   string
	State    func() *statemachine.State
	// Changed returns a channel closed at the next state publication
	// (statemachine.Manager.Changed): a broadcast, so waiting for our own
	// writes never steals a wake-up from the reconcile loop.
	Changed func() <-chan struct{}
	Logger  *zap.Logger
	// RebalanceDelay is how long membership must be stable before replicas
	// move to new nodes or off vanished ones (a restart moves nothing).
	RebalanceDelay time.Duration
	// MaxMovesInFlight caps shards being relocated at once; default 16.
	MaxMovesInFlight int
	// ClusterID is the etcd cluster this term was won in. The master acts only
	// once every source it reads was listed from that cluster, never on state
	// left over from a replaced or restored etcd. 0 skips the check.
	ClusterID uint64
	// Resync is the period of a full reconcile without events; default 1s.
	Resync time.Duration
	// RetryBase and RetryMax bound the back-off of a database whose
	// reconcile failed (doubling per failure, jittered); default 20ms, 5s.
	RetryBase, RetryMax time.Duration
	// ErrorLogInterval: a repeated identical error is logged once per
	// interval with its count; default 30s.
	ErrorLogInterval time.Duration
	// LivenessGrace: for this long after the term's state is first complete,
	// a node missing from the live set is not yet presumed dead and no
	// leader changes (nodes may still be re-registering, as after a restore
	// into a new etcd: electing among the first to return could pass over the
	// replica holding the newest writes). The lease TTL; 0 disables.
	LivenessGrace time.Duration
	// Now is the master's clock: every time-dependent decision reads it.
	Now func() time.Time
	// Metrics records the term, failovers and leader changes; may be nil.
	Metrics *Metrics
	// AskTxns asks a storage node for its replicas' last txn ids at
	// failover, for every database of the round in one request; AskTxn
	// asks per database, for nodes that do not serve AskTxns (ErrNoBatch).
	// Both nil: leaders are chosen by the tie-break alone. AskTimeout
	// bounds each question, and when the last of a round may be sent,
	// default 500ms.
	AskTxns    AskTxnsFunc
	AskTxn     AskTxnFunc
	AskTimeout time.Duration
	// TrustedAskTimeout bounds a whole round in which every shard needing
	// a leader has a trusted in-sync set (isrTrusted): every member holds
	// every acknowledged write, so the answers only rank the unacknowledged
	// tail, and a shard nobody answered for in time is led by the records'
	// max_term. A round with any stale or restored set waits AskTimeout.
	// Default 50ms: a live node answers within a few (its answer is read
	// from memory); one that does not is only ranked by its record, and
	// at 1,000 simulated nodes, where the agents' busy process answers a
	// dead domain's round 0.4-0.5 s in, each 100 ms more was 100 ms more
	// of every shard's failover. At or above AskTimeout it changes
	// nothing.
	TrustedAskTimeout time.Duration
	// Moves tracks storage nodes registering at another address across
	// terms (the candidate feeds it every state); nil: this term's own,
	// which sees only moves made while it runs.
	Moves *Moves
	// FirstSets records a new database's first in-sync sets with its
	// placement (firstSets), so that its leaders write none. Off, a shard
	// has no set until its leader publishes one (tests whose harness runs
	// no storage nodes rely on that).
	FirstSets bool
}

// Master runs the state machines for one term.
type Master struct {
	cfg  Config
	lg   *zap.Logger
	reqs chan op // operator requests, served on the master's goroutine
	// ops are the operators in flight, mirrored in etcd under
	// NS/operators/ (every change is written fenced, in the txn of the step
	// it records); loaded from there once per term before any decision.
	ops     map[shardKey]Operator
	waiters map[shardKey][]waiter // TransferLeader calls waiting for their operator
	loaded  bool
	members map[string]Membership // per cluster
	sigs    memberSigs            // MembershipSig per cluster, made once per set of nodes
	counts  replicaCounts         // databases with a replica count off their factor
	forced  bool
	queue   *workQueue         // databases to reconcile, with per-database retry
	derived derived            // cluster-wide inputs of the failover checks, per state version
	warn    *logrepeat.Limiter // repeated warnings: once per interval with a count
	ready   time.Time          // when this term first saw a complete state
	// spreadClean: per cluster, the inputs at which leader spreading last
	// found nothing to move.
	spreadClean map[string]string
	moves       *Moves    // storage nodes that registered again at another address
	led         ledSet    // databases found led as they should be on the current state
	scope       passScope // which databases a pass looks at
	// placed: databases this term placed whose writes the local state has
	// not shown yet (pipelined placement, see placeNew).
	placed map[string]ownPlacement
	// caches: per storage cluster, the placement placeNew decides on.
	caches map[string]*placeCache
	// lastPlaced is when the newest placement batch was written (see
	// placeNew's coalescing).
	lastPlaced time.Time
}

type op struct {
	run  func(ctx context.Context, st *statemachine.State) (any, error)
	done chan opResult
}

type opResult struct {
	v   any
	err error
}

// New prepares a master for cfg.Term.
func New(cfg Config) *Master {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxMovesInFlight == 0 {
		cfg.MaxMovesInFlight = 16
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 20 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 5 * time.Second
	}
	if cfg.AskTimeout == 0 {
		cfg.AskTimeout = 500 * time.Millisecond
	}
	if cfg.TrustedAskTimeout == 0 {
		cfg.TrustedAskTimeout = 50 * time.Millisecond
	}
	if cfg.Moves == nil {
		cfg.Moves = NewMoves()
	}
	if cfg.ErrorLogInterval == 0 {
		cfg.ErrorLogInterval = 30 * time.Second
	}
	lg := cfg.Logger.Named("master").With(zap.Int64("master_term", cfg.Term))
	return &Master{cfg: cfg, lg: lg,
		reqs: make(chan op), ops: map[shardKey]Operator{}, waiters: map[shardKey][]waiter{}, members: map[string]Membership{}, sigs: memberSigs{},
		spreadClean: map[string]string{}, moves: cfg.Moves, placed: map[string]ownPlacement{}, caches: map[string]*placeCache{},
		queue: newWorkQueue(cfg.RetryBase, cfg.RetryMax, rand.Float64), warn: logrepeat.New(lg, cfg.ErrorLogInterval, cfg.Now)}
}

// Run reconciles until ctx ends or the term is lost (ErrDeposed).
func (m *Master) Run(ctx context.Context) error {
	m.cfg.Metrics.termStarted(m.cfg.Term)
	defer m.cfg.Metrics.termEnded()
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	defer m.failWaiters()
	for {
		// Take the wake-up channel before reading state, so a publication
		// during the pass is not missed.
		changed := m.cfg.Changed()
		err := m.reconcile(ctx)
		m.notifyWaiters(m.cfg.State())
		if err != nil {
			if errors.Is(err, kv.ErrDeposed) {
				m.lg.Warn("deposed: a fenced write failed; stopping master work")
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.warn.Warn("reconcile", "reconcile failed; retrying", zap.Error(err))
		}
		// Wake for the earliest database retry, or the next placement
		// batch, as well.
		var retry <-chan time.Time
		var rt *time.Timer
		if at, ok := m.nextWake(); ok {
			rt = time.NewTimer(max(at.Sub(m.cfg.Now()), time.Millisecond))
			retry = rt.C
		}
		err = m.wait(ctx, changed, t.C, retry)
		if rt != nil {
			rt.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// wait blocks until something may need reconciling, serving operator
// requests in between; an error ends the term.
func (m *Master) wait(ctx context.Context, changed <-chan struct{}, tick, retry <-chan time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.cfg.Session.Done():
		return kv.ErrDeposed
	case <-changed:
	case <-tick:
	case <-retry:
	case o := <-m.reqs:
		v, err := o.run(ctx, m.cfg.State())
		o.done <- opResult{v, err}
		if errors.Is(err, kv.ErrDeposed) {
			return err
		}
	}
	return nil
}

// do runs fn on the master's goroutine, so operator requests never race the
// reconcile loop's writes, and returns its answer as fn's type.
func do[T any](ctx context.Context, m *Master, fn func(ctx context.Context, st *statemachine.State) (T, error)) (T, error) {
	var zero T
	o := op{run: func(ctx context.Context, st *statemachine.State) (any, error) { return fn(ctx, st) }, done: make(chan opResult, 1)}
	select {
	case m.reqs <- o:
	case <-ctx.Done():
		return zero, fmt.Errorf("%w: master busy: %v", models.ErrUnavailable, ctx.Err())
	}
	select {
	case r := <-o.done:
		v, _ := r.v.(T) // always a T: the op above wraps fn
		return v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("%w: master did not answer: %v", models.ErrUnavailable, ctx.Err())
	}
}

// write applies ops fenced on the term, then waits until the local state has
// seen the result in every source the ops touched, so the next decision reads
// its own writes (an assignment and its states are written together and must
// be seen together, or a pass could pair new states with an old assignment).
func (m *Master) write(ctx context.Context, cmps []kv.Cmp, ops []kv.Op, sources ...string) (bool, error) {
	ok, rev, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, cmps, ops)
	if err != nil || !ok {
		return ok, err
	}
	for _, src := range sources {
		if err := m.awaitRev(ctx, src, rev); err != nil {
			return true, err
		}
	}
	return true, nil
}

func (m *Master) awaitRev(ctx context.Context, source string, rev int64) error {
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		changed := m.cfg.Changed()
		if m.cfg.State().Revisions[source] >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("state did not reach revision %d of %s", rev, source)
		case <-changed:
		}
	}
}

// Ready reports whether st holds a complete, etcd-confirmed picture of the
// master's own sources: each has finished a list against etcd (not just the
// local backup). Storage clusters are checked one by one with ClusterReady.
func Ready(st *statemachine.State) bool {
	if st.FromBackup {
		return false
	}
	for _, src := range []string{statemachine.SourceStorageConfig, statemachine.SourceDatabaseConfig,
		statemachine.SourceAssign, statemachine.SourceShardState, statemachine.SourceDrain} {
		if !st.Synced[src] {
			return false
		}
	}
	return true
}

// sameCluster: every source in Cairn's own etcd was listed from the cluster
// this term was won in.
func (m *Master) sameCluster(st *statemachine.State) bool {
	if m.cfg.ClusterID == 0 {
		return true
	}
	for _, src := range []string{statemachine.SourceStorageConfig, statemachine.SourceDatabaseConfig,
		statemachine.SourceAssign, statemachine.SourceShardState, statemachine.SourceDrain} {
		if st.ListedFrom[src] != m.cfg.ClusterID {
			return false
		}
	}
	return true
}

// ClusterReady reports whether the live nodes and in-sync sets of one storage
// cluster have been read from its etcd: the master decides nothing for a
// cluster it cannot see (every leader would look dead), while clusters it can
// see go on.
func ClusterReady(st *statemachine.State, cluster string) bool {
	return st.Synced[statemachine.ClusterNodesSource(cluster)] && st.Synced[statemachine.ClusterISRSource(cluster)]
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own records always marshal
	}
	return b
}

func indexOf(ss models.ShardStates, id int) int {
	for i, s := range ss.Shards {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// maxTxnOps keeps every txn under etcd's default --max-txn-ops (128), and
// maxTxnBytes a publication's batches under its default
// --max-request-bytes (1.5 MiB): 50 databases of 1,024 shards' states
// would not fit.
const (
	maxTxnOps   = 100
	maxTxnBytes = 1 << 20
)

// verifyStates checks, in verify mode, that the changed shards of next keep
// the invariants over prev, the states they replace: terms only grow, one
// leader per term. Another incarnation of the database starts afresh.
func verifyStates(prev, next models.ShardStates, changed []int) {
	if !verify.On() || prev.UID != next.UID {
		return
	}
	for _, id := range changed {
		i, j := indexOf(prev, id), indexOf(next, id)
		if i < 0 || j < 0 {
			continue
		}
		p, n := prev.Shards[i], next.Shards[j]
		verify.ShardTerm(models.ShardID(next.DB, id), p.Leader, p.Term, n.Leader, n.Term)
	}
}
