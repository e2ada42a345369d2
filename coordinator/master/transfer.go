package master

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// transferWait bounds how long TransferLeader waits for its operator to
// finish; past it the operator goes on (it is persisted) and the caller is
// told to look at GET /api/v1/operators. Below the 10 s a node forwarding
// the request to the master waits, so the caller gets this answer rather
// than a timeout.
const transferWait = 8 * time.Second

// waiter is a caller of TransferLeader waiting for its operator.
type waiter struct {
	op   Operator
	done chan error // buffered: told once
}

// TransferLeader implements meta.MasterOps: a graceful leader change to an
// in-sync replica, or with Unclean to any live replica (forcing an offline
// shard back online, accepting that writes it never saw are lost). It is an
// operator like the master's own: validated, persisted under the master's
// namespace (a new master resumes it; GET /api/v1/operators shows it), then
// carried out by the executor as one fenced txn that publishes the new
// leader and deletes the record. It returns once the new leader is
// published, or with the reason the operator could not finish.
func (m *Master) TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error {
	done, err := do(ctx, m, func(ctx context.Context, st *statemachine.State) (chan error, error) {
		o, err := m.transferOp(st, db, shard, t)
		if err != nil || o == nil {
			return nil, err
		}
		if err := m.fencedChunks(ctx, []kv.Op{m.putOp(*o)}); err != nil {
			return nil, err
		}
		for _, w := range m.waiters[keyOf(*o)] {
			w.done <- fmt.Errorf("%w: a newer leader transfer of %s/%d replaced this one", models.ErrConflict, db, shard)
		}
		m.ops[keyOf(*o)] = *o
		w := waiter{op: *o, done: make(chan error, 1)}
		m.waiters[keyOf(*o)] = []waiter{w}
		m.lg.Info("leader transfer asked", zap.String("db", db), zap.Int("shard", shard),
			zap.String("from", o.FromLeader), zap.String("to", o.Leader), zap.Bool("unclean", o.Unclean))
		return w.done, nil
	})
	if err != nil || done == nil {
		return err
	}
	timer := time.NewTimer(transferWait)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: the leader transfer of %s/%d is in flight (GET /api/v1/operators): %w", models.ErrUnavailable, db, shard, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("%w: the leader transfer of %s/%d did not finish within %s; it is still in flight (GET /api/v1/operators)", models.ErrUnavailable, db, shard, transferWait)
	}
}

// transferOp validates a leader transfer against st and makes its operator
// (nil: the node already leads the shard).
func (m *Master) transferOp(st *statemachine.State, db string, shard int, t models.LeaderTransfer) (*Operator, error) {
	if !Ready(st) || !m.sameCluster(st) || !m.loaded {
		return nil, fmt.Errorf("%w: master is still loading state from etcd", models.ErrUnavailable)
	}
	a, ok := st.Assignments.Get(db)
	if !ok || shard < 0 || shard >= len(a.Shards) {
		return nil, fmt.Errorf("%w: shard %d of database %q", models.ErrNotFound, shard, db)
	}
	sh := a.Shards[shard]
	if !slices.Contains(sh.Replicas, t.NodeID) {
		return nil, fmt.Errorf("%w: node %q is not a replica of %s/%d (replicas %v)", models.ErrImpossible, t.NodeID, db, shard, sh.Replicas)
	}
	if _, live := st.Nodes.At(a.Cluster).Get(t.NodeID); !live {
		return nil, fmt.Errorf("%w: node %q is not live", models.ErrImpossible, t.NodeID)
	}
	cur, ok := st.ShardState(db, shard)
	if !ok {
		return nil, fmt.Errorf("%w: shard %d of %q has no published state yet", models.ErrUnavailable, shard, db)
	}
	if cur.Leader == t.NodeID && cur.Status == models.StatusOnline {
		return nil, nil
	}
	if !t.Unclean {
		if !shardInSync(st, a.Cluster, db, shard, []string{t.NodeID}) {
			return nil, fmt.Errorf("%w: node %q is not in the in-sync set of %s/%d; wait for it to catch up or pass \"unclean\": true", models.ErrImpossible, t.NodeID, db, shard)
		}
		if cur.Status != models.StatusOnline {
			return nil, fmt.Errorf("%w: %s/%d is offline: the master brings it back with an in-sync replica as soon as one is live; pass \"unclean\": true to force %q", models.ErrImpossible, db, shard, t.NodeID)
		}
		if _, draining := st.Drains[t.NodeID]; draining {
			return nil, fmt.Errorf("%w: node %q is draining; undrain it first", models.ErrImpossible, t.NodeID)
		}
	}
	if prev, busy := m.ops[shardKey{db, shard}]; busy && prev.Kind != OpLeader {
		return nil, fmt.Errorf("%w: %s/%d has a %s operator in flight (step %s); transfer its leader once it is done (GET /api/v1/operators)", models.ErrConflict, db, shard, prev.Kind, prev.Step)
	}
	o := Operator{DB: db, Shard: shard, Kind: OpLeader, Leader: t.NodeID, Unclean: t.Unclean, Step: StepLeader,
		MasterTerm: m.cfg.Term, Created: m.cfg.Now()}
	if cur.Status == models.StatusOnline {
		o.FromLeader = cur.Leader
	}
	return &o, nil
}

// notifyWaiters tells the callers of TransferLeader whose operator left the
// flight how it ended: published, or dropped (its target stopped qualifying).
// Called on the master's goroutine after each pass.
func (m *Master) notifyWaiters(st *statemachine.State) {
	for k, ws := range m.waiters {
		o, running := m.ops[k]
		keep := ws[:0]
		for _, w := range ws {
			if running && o.Kind == w.op.Kind && o.Leader == w.op.Leader && o.Created.Equal(w.op.Created) {
				keep = append(keep, w)
				continue
			}
			if s, ok := st.ShardState(k.DB, k.Shard); ok && s.Leader == w.op.Leader && s.Status == models.StatusOnline {
				w.done <- nil
			} else {
				w.done <- fmt.Errorf("%w: the leader transfer of %s/%d to %q was dropped: the node no longer qualifies (live, a replica, in sync)", models.ErrImpossible, k.DB, k.Shard, w.op.Leader)
			}
		}
		if len(keep) == 0 {
			delete(m.waiters, k)
		} else {
			m.waiters[k] = keep
		}
	}
}

// failWaiters answers every waiting TransferLeader when the term ends: its
// operator stays persisted and the next master resumes it.
func (m *Master) failWaiters() {
	for k, ws := range m.waiters {
		for _, w := range ws {
			w.done <- fmt.Errorf("%w: the master's term ended; the leader transfer of %s/%d is persisted and the next master resumes it", models.ErrUnavailable, k.DB, k.Shard)
		}
		delete(m.waiters, k)
	}
}
