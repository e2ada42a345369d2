package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// maxPlaceBatch bounds the databases placed by one decision, and
// placeWriters the writes in flight at once.
const (
	maxPlaceBatch = 256
	placeWriters  = 16
)

// growth is one database whose shards [len(assign.Shards), db.NumShards)
// have no replicas yet: a new database (nothing assigned), or one whose
// shard count grew.
type growth struct {
	db     models.Database
	assign models.Assignment  // as the decision read it (empty: absent)
	states models.ShardStates // as the decision read them
	// revAssign, revStates: the keys' mod revisions the decision read (0:
	// absent); the write is guarded by them, never by re-encoded bytes.
	revAssign, revStates int64
}

// placeNew places the missing shards of every database among names: one
// placement decision per storage cluster for all of them (the cluster view
// is built once, not once per database), then their assignments and states
// written in parallel, each its own fenced txn guarded by the revisions the
// decision read. Creating 1,000 databases then costs a few decisions and
// round trips, not 1,000 of each one after the other; one database is a
// batch of one. A batch placement cannot take (a database wanting more
// replicas than there are nodes) is placed one database at a time, so one
// database never holds the others back.
//
// It does not wait for its writes to come back through the watch: each
// fenced txn returns its revision, and what it wrote is kept in m.placed
// until the local state shows it, so the next batch is placed on a view that
// includes it (and never places it again) while the watch catches up. The
// databases waiting there are left out of the rest of the pass (syncDB,
// failover, rebalancing), which must not decide on a state without them.
// A database whose write failed is in the returned map, for its retry; the
// error is kv.ErrDeposed when the term ended.
func (m *Master) placeNew(ctx context.Context, names []string) (map[string]error, error) {
	if m.placeDeferred() {
		return nil, nil
	}
	st := m.cfg.State()
	byCluster := map[string][]growth{}
	n := 0
	for _, name := range names {
		db, exists := st.Databases.Get(name)
		a, has := st.Assignments.Get(name)
		_, pending := m.placed[name]
		if !exists || (has && len(a.Shards) >= db.NumShards) || pending || n >= maxPlaceBatch ||
			st.Invalid[statemachine.SourceAssign][name] != "" || st.Invalid[statemachine.SourceShardState][name] != "" ||
			!ClusterReady(st, db.StorageCluster) || (has && a.Cluster != db.StorageCluster) {
			continue
		}
		if !has {
			a = models.Assignment{DB: name, Cluster: db.StorageCluster}
		}
		byCluster[db.StorageCluster] = append(byCluster[db.StorageCluster], growth{db: db, assign: a, states: st.ShardStates.At(name),
			revAssign: st.ModRev(statemachine.SourceAssign, name), revStates: st.ModRev(statemachine.SourceShardState, name)})
		n++
	}
	failed := map[string]error{}
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		batch := byCluster[cluster]
		placed, err := m.place(ctx, st, cluster, batch, failed, len(batch) == 1)
		if err != nil {
			return failed, err
		}
		if !placed {
			for _, g := range batch {
				if _, err := m.place(ctx, st, cluster, []growth{g}, failed, true); err != nil {
					return failed, err
				}
			}
		}
	}
	return failed, nil
}

// place places batch on cluster and writes it; false when placement cannot
// take it (said, when alone, as a warning: waiting for storage nodes is not
// a failure of the database).
func (m *Master) place(ctx context.Context, st *statemachine.State, cluster string, batch []growth, failed map[string]error, alone bool) (bool, error) {
	pc, ok := m.caches[cluster]
	if !ok {
		pc = newPlaceCache()
		m.caches[cluster] = pc
	}
	next, err := placeBatch(pc.sync(st, cluster, m.placed), batch)
	if err != nil {
		if alone {
			m.warn.Warn("place/"+batch[0].db.Name, "cannot place database yet", zap.String("db", batch[0].db.Name), zap.Error(err))
		}
		return false, nil
	}
	m.lastPlaced = m.cfg.Now()
	return true, m.writePlaced(ctx, st, batch, next, failed)
}

// placeBatch places the missing shards of every database of batch with s,
// which holds their cluster, in one decision, balanced with everything
// already there, and returns each database's next assignment and states.
func placeBatch(s placement.Sharder, batch []growth) ([]ownPlacement, error) {
	add := map[placement.ShardKey]int{}
	for _, g := range batch {
		for i := len(g.assign.Shards); i < g.db.NumShards; i++ {
			add[placement.ShardKey{DB: g.db.Name, Shard: i}] = g.db.ReplicaFactor
		}
	}
	plan, err := s.PlaceNew(add)
	if err != nil {
		return nil, err
	}
	out := make([]ownPlacement, len(batch))
	for j, g := range batch {
		a := models.Assignment{DB: g.db.Name, Cluster: g.db.StorageCluster, Shards: slices.Clone(g.assign.Shards)}
		ss := models.ShardStates{DB: g.db.Name, Shards: slices.Clone(g.states.Shards), UID: g.db.UID}
		for i := len(g.assign.Shards); i < g.db.NumShards; i++ {
			t := plan.Target[placement.ShardKey{DB: g.db.Name, Shard: i}]
			a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: t.Replicas})
			ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: t.Leader, Term: 1, Status: models.StatusOnline})
		}
		out[j] = ownPlacement{db: g.db, assign: a, states: ss}
	}
	return out, nil
}

// writePlaced writes the placed databases' assignments and states in
// parallel, records each one written in m.placed and each one refused in
// failed; it returns kv.ErrDeposed when the term ended.
func (m *Master) writePlaced(ctx context.Context, st *statemachine.State, batch []growth, next []ownPlacement, failed map[string]error) error {
	var mu sync.Mutex
	var deposed error
	sem := make(chan struct{}, placeWriters)
	var wg sync.WaitGroup
	for j, g := range batch {
		p := next[j]
		name := g.db.Name
		var setCmps []kv.Cmp
		var setOps []kv.Op
		if g.revAssign == 0 && g.revStates == 0 {
			setCmps, setOps = m.firstSets(st, g.db, p.assign, p.states)
		}
		// The states say in which etcd cluster the sets were created with
		// them, so that the leaders take them from their watch unread.
		p.states.FirstSets = 0
		if len(setOps) > 0 {
			p.states.FirstSets = m.cfg.ClusterID
		}
		cmps := append([]kv.Cmp{kv.ModRevIs(m.cfg.Keys.Assign(name), g.revAssign), kv.ModRevIs(m.cfg.Keys.ShardState(name), g.revStates)}, setCmps...)
		ops := append([]kv.Op{kv.OpPut(m.cfg.Keys.Assign(name), mustJSON(p.assign), 0), kv.OpPut(m.cfg.Keys.ShardState(name), mustJSON(p.states), 0)}, setOps...)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ok, rev, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, cmps, ops)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, kv.ErrDeposed):
				deposed = err
			case err != nil:
				failed[name] = err
			case !ok:
				failed[name] = fmt.Errorf("%w: assignment or shard states of %s", errChanged, name)
			default:
				p.rev, p.at = rev, m.cfg.Now()
				m.placed[name] = p
				m.lg.Info("placed shards", zap.String("db", name), zap.Int("from", len(g.assign.Shards)), zap.Int("to", g.db.NumShards))
			}
		}()
	}
	wg.Wait()
	return deposed
}

// maxFirstSets: a new database with more shards than this leaves its first
// in-sync sets to its leaders (one txn holds at most 128 compares and 128
// operations in etcd's default configuration).
const maxFirstSets = 60

// firstSets are the compares and writes that record a new database's first
// in-sync sets with its placement, when its storage cluster lives in this
// etcd: every replica of a new shard is in sync (all are empty), so each set
// is every replica, at term 1, led by the shard's leader, in this etcd
// cluster. The leader finds exactly the set it would write and adopts it
// (storage persistISR) instead of writing it: a thousand new databases cost
// their leaders no write. Each set key must be absent (a set left by an
// earlier database of the same name is never overwritten: one the state
// shows leaves the sets to the leaders, and one it does not show yet fails
// the placement, retried after the watch has brought it).
func (m *Master) firstSets(st *statemachine.State, db models.Database, a models.Assignment, ss models.ShardStates) ([]kv.Cmp, []kv.Op) {
	sc, ok := st.StorageClusters[db.StorageCluster]
	if !m.cfg.FirstSets || !ok || len(sc.EtcdEndpoints) > 0 || len(a.Shards) > maxFirstSets || len(a.Shards) != len(ss.Shards) {
		return nil, nil
	}
	isr := st.ISR.At(db.StorageCluster)
	for _, sh := range a.Shards {
		if _, left := isr.Get(models.ShardID(db.Name, sh.ID)); left {
			return nil, nil
		}
	}
	ck := models.ClusterKeys{SNS: m.cfg.Keys.ClusterNamespace(sc)}
	var cmps []kv.Cmp
	var ops []kv.Op
	for i, sh := range a.Shards {
		s := ss.Shards[i]
		if s.ID != sh.ID || s.Status != models.StatusOnline || !slices.Contains(sh.Replicas, s.Leader) {
			return nil, nil
		}
		// The leader first, as a leader lists its own set.
		set := append([]string{s.Leader}, slices.DeleteFunc(slices.Clone(sh.Replicas), func(n string) bool { return n == s.Leader })...)
		key := ck.ISR(db.Name, sh.ID)
		cmps = append(cmps, kv.ModRevIs(key, 0))
		ops = append(ops, kv.OpPut(key, mustJSON(models.ISR{Leader: s.Leader, Term: s.Term, Replicas: set, ClusterID: m.cfg.ClusterID}), 0))
	}
	return cmps, ops
}
