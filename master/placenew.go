package master

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/cairn-db/cairn/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/placement"
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
// syncAssignment's, and the local state awaited once. Creating 1,000
// databases then costs a few decisions and round trips, not 1,000 of each
// one after the other. What it does not place (a guard that failed, a
// cluster not ready) is left to syncAssignment.
func (m *Master) placeNew(ctx context.Context, names []string) error {
	st := m.cfg.State()
	byCluster := map[string][]models.Database{}
	n := 0
	for _, name := range names {
		db, exists := st.Databases.Get(name)
		has := st.Assignments.Has(name)
		if !exists || has || n >= maxPlaceBatch || st.Invalid[statemachine.SourceAssign][name] != "" ||
			st.Invalid[statemachine.SourceShardState][name] != "" || !ClusterReady(st, db.StorageCluster) ||
			st.ModRev(statemachine.SourceShardState, name) != 0 {
			continue
		}
		byCluster[db.StorageCluster] = append(byCluster[db.StorageCluster], db)
		n++
	}
	var maxRev int64
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		dbs := byCluster[cluster]
		add := map[placement.ShardKey]int{}
		for _, db := range dbs {
			for i := range db.NumShards {
				add[placement.ShardKey{DB: db.Name, Shard: i}] = db.ReplicaFactor
			}
		}
		plan, err := placement.PlaceNew(clusterView(st, cluster), add)
		if err != nil {
			continue // syncAssignment says why, per database
		}
		rev, err := m.writeNew(ctx, dbs, plan)
		if err != nil {
			return err
		}
		maxRev = max(maxRev, rev)
	}
	if maxRev == 0 {
		return nil
	}
	for _, src := range []string{statemachine.SourceAssign, statemachine.SourceShardState} {
		if err := m.awaitRev(ctx, src, maxRev); err != nil {
			return err
		}
	}
	return nil
}

// writeNew writes the placed databases' assignments and first states in
// parallel; it returns the highest revision written.
func (m *Master) writeNew(ctx context.Context, dbs []models.Database, plan placement.Plan) (int64, error) {
	var mu sync.Mutex
	var maxRev int64
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
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// Both keys absent, as the decision read them.
			ok, rev, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, []kv.Cmp{
				kv.ModRevIs(m.cfg.Keys.Assign(db.Name), 0), kv.ModRevIs(m.cfg.Keys.ShardState(db.Name), 0),
			}, []kv.Op{
				kv.OpPut(m.cfg.Keys.Assign(db.Name), mustJSON(a), 0),
				kv.OpPut(m.cfg.Keys.ShardState(db.Name), mustJSON(ss), 0),
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, kv.ErrDeposed):
				deposed = err
			case err != nil || !ok:
				// syncAssignment places it again, alone.
			default:
				maxRev = max(maxRev, rev)
				m.lg.Info("placed shards", zap.String("db", db.Name), zap.Int("from", 0), zap.Int("to", db.NumShards))
			}
		}()
	}
	wg.Wait()
	return maxRev, deposed
}
