package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// reconcile is one level-triggered pass over everything the master owns: each
// database due in the work queue is synced on its own (an error in one only
// schedules its retry, never delays another's failover), then rebalancing.
func (m *Master) reconcile(ctx context.Context) error {
	st := m.cfg.State()
	if !Ready(st) || !m.sameCluster(st) {
		// A partial picture is worse than none: without the live nodes every
		// leader looks dead, without the databases every assignment looks
		// orphaned. Wait for the next publication.
		m.lg.Debug("local state not loaded from etcd yet; waiting")
		return nil
	}
	if m.ready.IsZero() {
		m.ready = m.cfg.Now()
	}
	if !m.loaded {
		if err := m.loadOperators(ctx); err != nil {
			return err
		}
	}
	m.noteMoves(st)
	// Only the databases whose inputs changed are looked at (passScope).
	m.led.sync(st)
	forgot, all := m.led.drain()
	for _, name := range m.prunePlaced(st) {
		forgot = mapWith(forgot, name)
	}
	for name := range m.scope.names(st, m.cfg.Now(), m.cfg.Resync, forgot, all) {
		m.queue.Add(name)
	}
	due := m.queue.Due(m.cfg.Now())
	failed, err := m.placeNew(ctx, due)
	if err != nil {
		return err // deposed
	}
	// What this term just placed is decided on once the state shows it.
	due = m.withoutPending(due)
	var synced []string
	for _, name := range due {
		err := failed[name]
		if err == nil {
			err = m.syncDB(ctx, name)
		}
		if errors.Is(err, kv.ErrDeposed) || ctx.Err() != nil {
			return err
		}
		if err == nil {
			synced = append(synced, name)
		} else {
			failed[name] = err
		}
	}
	// Failover of every database due at once: one round of questions to
	// the replicas and of writes, however many databases a dead node led.
	unpublished, failedOver := m.failover(ctx, synced)
	m.scope.checked(synced, m.led.dbs)
	for name, err := range unpublished {
		if errors.Is(err, kv.ErrDeposed) || ctx.Err() != nil {
			return err
		}
		failed[name] = err
	}
	for _, name := range due {
		m.settled(name, failed[name])
	}
	if len(m.placed) > 0 {
		// Moves are decided on the whole cluster: not on a state missing
		// databases just placed. The publication showing them wakes the
		// next pass.
		return nil
	}
	if failedOver {
		// Leaders just moved: more nodes of a dying domain are usually
		// being lost, and their failover should not wait behind a scan of
		// every assignment and state (Schedule: 0.15-0.24 s of the loop at
		// 1,000 nodes, run between the first lost nodes' pass and the
		// rest's). The publication wakes the next pass, which rebalances
		// once no leader has to move.
		m.cfg.Metrics.rebalanceDeferred()
		return nil
	}
	if err := m.rebalance(ctx); err != nil {
		if errors.Is(err, kv.ErrDeposed) || ctx.Err() != nil {
			return err
		}
		m.warn.Warn("rebalance", "rebalance step failed; retrying", zap.Error(err))
	}
	return nil
}

// syncDB brings one database's keys in line with the state before its
// failover: an unreadable key waits for an operator, an earlier incarnation's
// keys and a dropped database's assignment are deleted.
func (m *Master) syncDB(ctx context.Context, name string) error {
	st := m.cfg.State()
	for _, k := range []struct{ source, key string }{
		{statemachine.SourceAssign, m.cfg.Keys.Assign(name)}, {statemachine.SourceShardState, m.cfg.Keys.ShardState(name)},
	} {
		if why := st.Invalid[k.source][name]; why != "" {
			// Never overwrite what nobody could read: an operator decides.
			return fmt.Errorf("%w: %s: %s; fix or delete the key", errUnreadable, k.key, why)
		}
	}
	if dropped, err := m.dropEarlierIncarnation(ctx, name); err != nil || dropped {
		return err // dropped: the next pass places the database afresh
	}
	return m.dropAssignment(ctx, name)
}

// settled records the outcome of one database's pass: a failure schedules
// its retry after a back-off, a success after failures says so once.
func (m *Master) settled(name string, err error) {
	if err == nil {
		if m.queue.Failures(name) > 0 {
			m.queue.Forget(name)
			m.warn.Reset("reconcile/" + name)
			m.warn.Reset("place/" + name)
			m.lg.Info("database reconciled again", zap.String("db", name))
		}
		return
	}
	delay := m.queue.Failed(name, m.cfg.Now())
	m.warn.Warn("reconcile/"+name, "database reconcile failed; retrying", zap.String("db", name),
		zap.Int("failures", m.queue.Failures(name)), zap.Duration("retry_in", delay), zap.Error(err))
}

// dropEarlierIncarnation deletes the assignment and shard states of a
// database dropped and created again before this master saw it gone (the
// config's delete and put came as one change, or while it was not master):
// the states name another incarnation's uid, storage nodes give no role from
// them, and the new database would never get a leader. Both keys go in one
// txn guarded by the revisions the decision read (the config's included);
// true when they did. States without a uid (written by an older version)
// cannot tell and are kept.
func (m *Master) dropEarlierIncarnation(ctx context.Context, name string) (bool, error) {
	st := m.cfg.State()
	db, exists := st.Databases.Get(name)
	states, has := st.ShardStates.Get(name)
	if !exists || !has || db.UID == "" || states.UID == "" || states.UID == db.UID {
		return false, nil
	}
	ok, err := m.write(ctx, []kv.Cmp{
		kv.ModRevIs(m.cfg.Keys.DatabaseConfig(name), st.ModRev(statemachine.SourceDatabaseConfig, name)),
		kv.ModRevIs(m.cfg.Keys.Assign(name), st.ModRev(statemachine.SourceAssign, name)),
		kv.ModRevIs(m.cfg.Keys.ShardState(name), st.ModRev(statemachine.SourceShardState, name)),
	}, []kv.Op{
		kv.OpDelete(m.cfg.Keys.Assign(name)), kv.OpDelete(m.cfg.Keys.ShardState(name)),
	}, statemachine.SourceAssign, statemachine.SourceShardState)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, fmt.Errorf("%w: database %s, its assignment or shard states", errChanged, name)
	}
	m.lg.Info("dropped the assignment of an earlier database with the same name", zap.String("db", name),
		zap.String("uid", db.UID), zap.String("earlier_uid", states.UID))
	return true, nil
}

// dropAssignment deletes the assignment and states of a dropped database
// (placeNew creates and grows them).
func (m *Master) dropAssignment(ctx context.Context, name string) error {
	st := m.cfg.State()
	_, has := st.Assignments.Get(name)
	if _, exists := st.Databases.Get(name); exists || !has {
		return nil
	}
	// Only if the database is really gone from etcd: its config and
	// assignment are watched apart, and one written with the other (a
	// restore) may show up second.
	ok, err := m.write(ctx, []kv.Cmp{
		kv.CreateRevIs(m.cfg.Keys.DatabaseConfig(name), 0),
		kv.ModRevIs(m.cfg.Keys.Assign(name), st.ModRev(statemachine.SourceAssign, name)),
	}, []kv.Op{
		kv.OpDelete(m.cfg.Keys.Assign(name)), kv.OpDelete(m.cfg.Keys.ShardState(name)),
	}, statemachine.SourceAssign, statemachine.SourceShardState)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: database %s or its assignment", errChanged, name)
	}
	m.lg.Info("dropped assignment of deleted database", zap.String("db", name))
	return nil
}

// mapWith is set with key in it, made if nil.
func mapWith(set map[string]bool, key string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[key] = true
	return set
}

// inGrace reports whether now is within grace of ready, the moment the term
// first saw a complete state.
func inGrace(ready, now time.Time, grace time.Duration) bool {
	return now.Sub(ready) < grace
}

// errUnreadable: a key the master owns holds a value it cannot decode or
// validate; the database waits for an operator, the others go on.
var errUnreadable = errors.New("value in etcd cannot be used")

// errChanged: a guarded write found the key at another revision than the
// decision read (a write the local state has not seen yet, or a value it
// could not decode); the database is retried after its back-off.
var errChanged = errors.New("changed underneath; recomputing")

// applyFailover writes failover and offline operators into the shard states.
func applyFailover(db string, prev models.ShardStates, ops []Operator) (models.ShardStates, []int) {
	next := models.ShardStates{DB: db, Shards: slices.Clone(prev.Shards), UID: prev.UID}
	var changed []int
	for _, o := range ops {
		i := indexOf(next, o.Shard)
		var s models.ShardState
		if i < 0 {
			s = models.ShardState{ID: o.Shard}
		} else {
			s = next.Shards[i]
		}
		if o.Kind == OpOffline {
			s.Status, s.Reason = models.StatusOffline, o.Reason
		} else {
			s = models.ShardState{ID: o.Shard, Leader: o.Leader, Term: o.Term, Status: models.StatusOnline, Reason: o.Reason}
		}
		if i < 0 {
			next.Shards = append(next.Shards, s)
		} else {
			next.Shards[i] = s
		}
		changed = append(changed, o.Shard)
	}
	return next, changed
}
