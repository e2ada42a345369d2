package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"go.uber.org/zap"
)

// Config of one term of mastership.
type Config struct {
	Store    coordinator.Store
	Keys     models.Keys
	Election *coordinator.Election
	Term     int64
	Session  *coordinator.Session // the master's lease: failover locks are bound to it
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
	Now    func() time.Time
	// AskTxn asks a storage node for its replicas' last txn ids at failover
	// (nil: leaders are chosen by the tie-break alone); AskTimeout bounds
	// each question, default 500ms.
	AskTxn     AskTxnFunc
	AskTimeout time.Duration
}

// Master runs the state machines for one term.
type Master struct {
	cfg     Config
	lg      *zap.Logger
	ops     chan op
	pending map[placement.ShardKey][]string // relocation targets in flight
	leaders map[placement.ShardKey]string   // plan's leaders, applied once relocations finish
	members map[string]membership           // per cluster
	forced  bool
}

type membership struct {
	sig      string
	since    time.Time
	balanced string // signature at which a plan last had no relocations
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
	if cfg.AskTimeout == 0 {
		cfg.AskTimeout = 500 * time.Millisecond
	}
	return &Master{cfg: cfg, lg: cfg.Logger.Named("master").With(zap.Int64("master_term", cfg.Term)),
		ops: make(chan op), pending: map[placement.ShardKey][]string{}, leaders: map[placement.ShardKey]string{}, members: map[string]membership{}}
}

// Run reconciles until ctx ends or the term is lost (ErrDeposed).
func (m *Master) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	for {
		// Take the wake-up channel before reading state, so a publication
		// during the pass is not missed.
		changed := m.cfg.Changed()
		if err := m.reconcile(ctx); err != nil {
			if errors.Is(err, coordinator.ErrDeposed) {
				m.lg.Warn("deposed: a fenced write failed; stopping master work")
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.lg.Warn("reconcile failed; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.cfg.Session.Done():
			return coordinator.ErrDeposed
		case <-changed:
		case <-t.C:
		case o := <-m.ops:
			v, err := o.run(ctx, m.cfg.State())
			o.done <- opResult{v, err}
			if errors.Is(err, coordinator.ErrDeposed) {
				return err
			}
		}
	}
}

// do runs fn on the master's goroutine, so operator requests never race the
// reconcile loop's writes.
func (m *Master) do(ctx context.Context, fn func(ctx context.Context, st *statemachine.State) (any, error)) (any, error) {
	o := op{run: fn, done: make(chan opResult, 1)}
	select {
	case m.ops <- o:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: master busy: %v", models.ErrUnavailable, ctx.Err())
	}
	select {
	case r := <-o.done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: master did not answer: %v", models.ErrUnavailable, ctx.Err())
	}
}

// write applies ops fenced on the term, then waits until the local state has
// seen the result in every source the ops touched, so the next decision reads
// its own writes (an assignment and its states are written together and must
// be seen together, or a pass could pair new states with an old assignment).
func (m *Master) write(ctx context.Context, cmps []coordinator.Cmp, ops []coordinator.Op, sources ...string) (bool, error) {
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

// reconcile is one level-triggered pass over everything the master owns.
func (m *Master) reconcile(ctx context.Context) error {
	if st := m.cfg.State(); !Ready(st) || !m.sameCluster(st) {
		// A partial picture is worse than none: without the live nodes every
		// leader looks dead, without the databases every assignment looks
		// orphaned. Wait for the next publication.
		m.lg.Debug("local state not loaded from etcd yet; waiting")
		return nil
	}
	if err := m.syncAssignments(ctx); err != nil {
		return err
	}
	if err := m.failover(ctx); err != nil {
		return err
	}
	return m.rebalance(ctx)
}

// syncAssignments creates assignments for new databases, grows them, and
// deletes those of dropped databases.
func (m *Master) syncAssignments(ctx context.Context) error {
	st := m.cfg.State()
	names := slices.Sorted(maps.Keys(st.Databases))
	for _, name := range names {
		db := st.Databases[name]
		a, has := st.Assignments[name]
		if (has && len(a.Shards) >= db.NumShards) || !ClusterReady(st, db.StorageCluster) {
			continue
		}
		from := len(a.Shards)
		as, ss, err := newShards(st, db, from, db.NumShards)
		if err != nil {
			m.lg.Warn("cannot place database yet", zap.String("db", name), zap.Error(err))
			continue
		}
		next := models.Assignment{DB: name, Cluster: db.StorageCluster, Shards: append(slices.Clone(a.Shards), as...)}
		states := st.ShardStates[name]
		nextStates := models.ShardStates{DB: name, Shards: append(slices.Clone(states.Shards), ss...)}
		cmp := coordinator.CreateRevIs(m.cfg.Keys.Assign(name), 0)
		if has {
			cmp = coordinator.ValueIs(m.cfg.Keys.Assign(name), mustJSON(a))
		}
		ok, err := m.write(ctx, []coordinator.Cmp{cmp}, []coordinator.Op{
			coordinator.OpPut(m.cfg.Keys.Assign(name), mustJSON(next), 0),
			coordinator.OpPut(m.cfg.Keys.ShardState(name), mustJSON(nextStates), 0),
		}, statemachine.SourceAssign, statemachine.SourceShardState)
		if err != nil {
			return err
		}
		if ok {
			m.lg.Info("placed shards", zap.String("db", name), zap.Int("from", from), zap.Int("to", db.NumShards))
		}
		st = m.cfg.State()
	}
	for name := range st.Assignments {
		if _, ok := st.Databases[name]; ok {
			continue
		}
		if _, err := m.write(ctx, nil, []coordinator.Op{
			coordinator.OpDelete(m.cfg.Keys.Assign(name)), coordinator.OpDelete(m.cfg.Keys.ShardState(name)),
		}, statemachine.SourceAssign, statemachine.SourceShardState); err != nil {
			return err
		}
		m.lg.Info("dropped assignment of deleted database", zap.String("db", name))
	}
	return nil
}

// failover publishes new leaders for shards whose leader died, under the
// per-shard failover locks.
func (m *Master) failover(ctx context.Context) error {
	st := m.cfg.State()
	names := slices.Sorted(maps.Keys(st.ShardStates))
	leads := map[string]map[string]int{} // per cluster, built on first need
	for _, name := range names {
		a, ok := st.Assignments[name]
		if !ok || !ClusterReady(st, a.Cluster) {
			continue
		}
		in := ShardInputs{DB: name, Assign: a, States: st.ShardStates[name],
			Live: st.Nodes[a.Cluster], ISR: st.ISR[a.Cluster], Drains: st.Drains}
		if !anyNeedsLeader(in) {
			continue
		}
		if leads[a.Cluster] == nil {
			leads[a.Cluster] = ClusterLeads(st.ShardStates, st.Assignments, a.Cluster)
		}
		in.Leads = leads[a.Cluster]
		in.Answers = gatherTxn(ctx, m.cfg.AskTxn, m.cfg.AskTimeout, in, m.lg)
		next, changed := PlanLeaders(in)
		if len(changed) == 0 {
			continue
		}
		if err := m.publishStates(ctx, name, st.ShardStates[name], next, changed); err != nil {
			return err
		}
		for _, id := range changed {
			s := next.Shards[indexOf(next, id)]
			m.lg.Info("shard leader changed", zap.String("db", name), zap.Int("shard", id),
				zap.String("leader", s.Leader), zap.Int64("term", s.Term), zap.String("status", s.Status), zap.String("reason", s.Reason))
		}
	}
	return nil
}

func indexOf(ss models.ShardStates, id int) int {
	for i, s := range ss.Shards {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// maxTxnOps keeps every txn under etcd's default --max-txn-ops (128).
const maxTxnOps = 100

// publishStates takes the failover lock of each changed shard (a unique value
// bound to the master's lease; only its creator deletes it), publishes the
// database's states in one fenced txn guarded by the value it was computed
// from, and releases the locks.
func (m *Master) publishStates(ctx context.Context, db string, prev, next models.ShardStates, changed []int) error {
	token := []byte(m.cfg.NodeID + "/" + strconv.FormatInt(m.cfg.Term, 10) + "/" + strconv.FormatInt(m.cfg.Now().UnixNano(), 10))
	var locked []string
	release := func() {
		rctx := context.WithoutCancel(ctx)
		for i := 0; i < len(locked); i += maxTxnOps {
			chunk := locked[i:min(i+maxTxnOps, len(locked))]
			// Delete only our own locks: compare each one's unique value. A
			// chunk is one txn (a failover of 1000 shards would otherwise wait
			// for 1000 round trips); if any lock is not ours any more, fall
			// back to one txn per key so the others are still released.
			cmps := make([]coordinator.Cmp, 0, len(chunk))
			ops := make([]coordinator.Op, 0, len(chunk))
			for _, k := range chunk {
				cmps = append(cmps, coordinator.ValueIs(k, token))
				ops = append(ops, coordinator.OpDelete(k))
			}
			if ok, _, err := m.cfg.Store.Txn(rctx, cmps, ops); err == nil && ok {
				continue
			}
			for _, k := range chunk {
				_, _, _ = m.cfg.Store.Txn(rctx, []coordinator.Cmp{coordinator.ValueIs(k, token)}, []coordinator.Op{coordinator.OpDelete(k)})
			}
		}
	}
	defer release()
	for i := 0; i < len(changed); i += maxTxnOps {
		chunk := changed[i:min(i+maxTxnOps, len(changed))]
		cmps := make([]coordinator.Cmp, 0, len(chunk))
		ops := make([]coordinator.Op, 0, len(chunk))
		keys := make([]string, 0, len(chunk))
		for _, id := range chunk {
			k := m.cfg.Keys.FailoverLock(db, id)
			cmps = append(cmps, coordinator.CreateRevIs(k, 0))
			ops = append(ops, coordinator.OpPut(k, token, m.cfg.Session.Lease()))
			keys = append(keys, k)
		}
		ok, _, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, cmps, ops)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("failover lock of %s held by another orchestrator; retrying", db)
		}
		locked = append(locked, keys...)
	}
	key := m.cfg.Keys.ShardState(db)
	ok, err := m.write(ctx, []coordinator.Cmp{coordinator.ValueIs(key, mustJSON(prev))},
		[]coordinator.Op{coordinator.OpPut(key, mustJSON(next), 0)}, statemachine.SourceShardState)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("shard states of %s changed underneath; recomputing", db)
	}
	return nil
}

// TransferLeader implements broker.MasterOps: a graceful leader change to an
// in-sync replica, or with Unclean to any live replica (forcing an offline
// shard back online, accepting that writes it never saw are lost).
func (m *Master) TransferLeader(ctx context.Context, db string, shard int, t web.LeaderTransfer) error {
	_, err := m.do(ctx, func(ctx context.Context, st *statemachine.State) (any, error) {
		if !Ready(st) || !m.sameCluster(st) {
			return nil, fmt.Errorf("%w: master is still loading state from etcd", models.ErrUnavailable)
		}
		a, ok := st.Assignments[db]
		if !ok || shard < 0 || shard >= len(a.Shards) {
			return nil, fmt.Errorf("%w: shard %d of database %q", models.ErrNotFound, shard, db)
		}
		sh := a.Shards[shard]
		if !slices.Contains(sh.Replicas, t.NodeID) {
			return nil, fmt.Errorf("%w: node %q is not a replica of %s/%d (replicas %v)", models.ErrImpossible, t.NodeID, db, shard, sh.Replicas)
		}
		if _, live := st.Nodes[a.Cluster][t.NodeID]; !live {
			return nil, fmt.Errorf("%w: node %q is not live", models.ErrImpossible, t.NodeID)
		}
		if !t.Unclean && !shardInSync(st, a.Cluster, db, shard, []string{t.NodeID}) {
			return nil, fmt.Errorf("%w: node %q is not in the in-sync set of %s/%d; wait for it to catch up or pass \"unclean\": true", models.ErrImpossible, t.NodeID, db, shard)
		}
		prev := st.ShardStates[db]
		cur, _ := st.ShardState(db, shard)
		if cur.Leader == t.NodeID && cur.Status == models.StatusOnline {
			return nil, nil
		}
		next := models.ShardStates{DB: db, Shards: slices.Clone(prev.Shards)}
		i := indexOf(next, shard)
		if i < 0 {
			return nil, fmt.Errorf("%w: shard %d of %q has no published state yet", models.ErrUnavailable, shard, db)
		}
		next.Shards[i] = models.ShardState{ID: shard, Leader: t.NodeID, Term: cur.Term + 1, Status: models.StatusOnline}
		return nil, m.publishStates(ctx, db, prev, next, []int{shard})
	})
	return err
}
