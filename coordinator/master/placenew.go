package master

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// maxPlaceBatch bounds the new databases placed by one decision, and
// placeWriters the writes in flight at once.
const (
	maxPlaceBatch = 256
	placeWriters  = 16
)

// placeNew places every database among names that has no assignment yet:
// one placement decision per storage cluster for all of them (the cluster
// view is built once, not once per database), then their assignments and
// states written in parallel, each its own fenced txn guarded like
// syncAssignment's. Creating 1,000 databases then costs a few decisions and
// round trips, not 1,000 of each one after the other. What it does not
// place (a guard that failed, a cluster not ready) is left to syncAssignment.
//
// It does not wait for its writes to come back through the watch: each
// fenced txn returns its revision, and what it wrote is kept in m.placed
// until the local state shows it, so the next batch is placed on a view that
// includes it (and never places it again) while the watch catches up. The
// databases waiting there are left out of the rest of the pass (syncDB,
// rebalancing), which must not decide on a state without them.
func (m *Master) placeNew(ctx context.Context, names []string) error {
	if m.placeDeferred() {
		return nil
	}
	st := m.cfg.State()
	byCluster := map[string][]models.Database{}
	n := 0
	for _, name := range names {
		db, exists := st.Databases.Get(name)
		has := st.Assignments.Has(name)
		_, pending := m.placed[name]
		if !exists || has || pending || n >= maxPlaceBatch || st.Invalid[statemachine.SourceAssign][name] != "" ||
			st.Invalid[statemachine.SourceShardState][name] != "" || !ClusterReady(st, db.StorageCluster) ||
			st.ModRev(statemachine.SourceShardState, name) != 0 {
			continue
		}
		byCluster[db.StorageCluster] = append(byCluster[db.StorageCluster], db)
		n++
	}
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		dbs := byCluster[cluster]
		add := map[placement.ShardKey]int{}
		for _, db := range dbs {
			for i := range db.NumShards {
				add[placement.ShardKey{DB: db.Name, Shard: i}] = db.ReplicaFactor
			}
		}
		plan, err := placeNew(m.placeView(st, cluster), add)
		if err != nil {
			continue // syncAssignment says why, per database
		}
		m.lastPlaced = m.cfg.Now()
		if err := m.writeNew(ctx, st, dbs, plan); err != nil {
			return err
		}
	}
	return nil
}

// writeNew writes the placed databases' assignments and first states in
// parallel, and records each one written in m.placed.
func (m *Master) writeNew(ctx context.Context, st *statemachine.State, dbs []models.Database, plan placement.Plan) error {
	var mu sync.Mutex
	var deposed error
	sem := make(chan struct{}, placeWriters)
	var wg sync.WaitGroup
	for _, db := range dbs {
		a := models.Assignment{DB: db.Name, Cluster: db.StorageCluster}
		ss := models.ShardStates{DB: db.Name, UID: db.UID}
		for i := range db.NumShards {
			t := plan.Target[placement.ShardKey{DB: db.Name, Shard: i}]
			a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: t.Replicas})
			ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: t.Leader, Term: 1, Status: models.StatusOnline})
		}
		// Both keys absent, as the decision read them.
		cmps := []kv.Cmp{kv.ModRevIs(m.cfg.Keys.Assign(db.Name), 0), kv.ModRevIs(m.cfg.Keys.ShardState(db.Name), 0)}
		ops := []kv.Op{kv.OpPut(m.cfg.Keys.Assign(db.Name), mustJSON(a), 0), kv.OpPut(m.cfg.Keys.ShardState(db.Name), mustJSON(ss), 0)}
		c, i := m.firstSets(st, db, a, ss)
		cmps, ops = append(cmps, c...), append(ops, i...)
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
			case err != nil || !ok:
				// syncAssignment places it again, alone.
			default:
				m.placed[db.Name] = ownPlacement{rev: rev, at: m.cfg.Now(), db: db, assign: a, states: ss}
				m.lg.Info("placed shards", zap.String("db", db.Name), zap.Int("from", 0), zap.Int("to", db.NumShards))
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
// earlier database of the same name is never overwritten: the placement
// then fails as a whole and syncAssignment places the database without
// them).
func (m *Master) firstSets(st *statemachine.State, db models.Database, a models.Assignment, ss models.ShardStates) ([]kv.Cmp, []kv.Op) {
	sc, ok := st.StorageClusters[db.StorageCluster]
	if !m.cfg.FirstSets || !ok || len(sc.EtcdEndpoints) > 0 || len(a.Shards) > maxFirstSets || len(a.Shards) != len(ss.Shards) {
		return nil, nil
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
