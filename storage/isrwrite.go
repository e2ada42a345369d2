package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairn-db/cairn/kv"
	"github.com/cairn-db/cairn/models"
)

// ErrShardGone: the shard's state or its in-sync set vanished from etcd while
// this replica led it (a dropped database, an emptied or restored etcd).
var ErrShardGone = errors.New("storage: shard no longer in etcd")

// persistISR writes the in-sync set, fenced so that a leader never writes a
// set for a shard that etcd no longer has:
//   - it never overwrites a set of a newer term, and compares the key's mod
//     revision as read;
//   - when the storage cluster shares the main etcd, it reads the database's
//     shard-state key, which must name this node leader at this term, and the
//     same txn requires that key's create revision as read: no set is
//     (re)created for a database etcd dropped or never had (a restore), yet
//     the master's updates of other shards' states do not fail the write;
//   - without that fence (the cluster has its own etcd), it creates an absent
//     key only on its term's first write: a set this leader wrote and that is
//     now gone was removed by someone else (etcd wiped, an older backup
//     restored) and is not recreated.
//
// ErrNotHolder: this process no longer holds its node id's record (another
// process re-created it after this one's lease lapsed: a copy of the data
// dir), so it may not change in-sync sets: it would shrink them to itself and
// acknowledge writes alone while the other process leads in its place.
var ErrNotHolder = errors.New("storage: node id held by another process")

func (r *replica) persistISR(ctx context.Context, term int64, isr []string) error {
	key := r.h.ck.ISR(r.db, r.shard)
	r.mu.Lock()
	wrote := r.isrTerm == term && r.isrRev != 0
	r.mu.Unlock()
	kvp, err := r.h.store.Get(ctx, key)
	if err != nil {
		return err
	}
	fence, err := r.stateFence(ctx, term)
	if err != nil {
		return err
	}
	// The set records the etcd cluster it was written in, so a copy restored
	// into another one is recognised (by the master and by the next leader).
	cid, err := r.h.store.ClusterID(ctx)
	if err != nil {
		return err
	}
	cmps := []kv.Cmp{kv.ModRevIs(key, 0)}
	switch {
	case kvp == nil && wrote && fence == nil:
		return fmt.Errorf("%w: the in-sync set of %s written at term %d was removed; not recreating it", ErrShardGone, r.id, term)
	case kvp != nil:
		var cur models.ISR
		if json.Unmarshal(kvp.Value, &cur) == nil {
			if cur.Term > term {
				return fmt.Errorf("%w: in-sync set of %s is at term %d", ErrStaleTerm, r.id, cur.Term)
			}
			// A set restored from another etcd cluster at a term not below
			// ours belongs to the restored state's leadership: the master
			// re-elects the shard from every replica's log first.
			if cur.ClusterID != 0 && cid != 0 && cur.ClusterID != cid && cur.Term >= term {
				return fmt.Errorf("%w: the in-sync set of %s at term %d was restored from etcd cluster %x", ErrStaleTerm, r.id, cur.Term, cur.ClusterID)
			}
		}
		cmps[0] = kv.ModRevIs(key, kvp.ModRev)
	}
	if fence != nil {
		cmps = append(cmps, *fence)
	}
	// Only the process holding this node id's record may change the set: a
	// copy that re-created the record after our lease lapsed leads in our
	// place, and a set shrunk to ourselves would let us acknowledge alone.
	if rev := r.h.recordRev.Load(); rev != 0 {
		cmps = append(cmps, kv.CreateRevIs(r.h.ck.Node(r.h.nodeID), rev))
	}
	val, _ := json.Marshal(models.ISR{Leader: r.h.nodeID, Term: term, Replicas: isr, ClusterID: cid})
	ok, rev, err := r.h.store.Txn(ctx, cmps, []kv.Op{kv.OpPut(key, val, 0)})
	if err != nil {
		return err
	}
	if !ok {
		if rev := r.h.recordRev.Load(); rev != 0 {
			if node, gerr := r.h.store.Get(ctx, r.h.ck.Node(r.h.nodeID)); gerr == nil && (node == nil || node.CreateRev != rev) {
				return fmt.Errorf("%w: the record of node %s is no longer the one this process registered", ErrNotHolder, r.h.nodeID)
			}
		}
		return fmt.Errorf("in-sync set or state of %s changed concurrently", r.id)
	}
	r.mu.Lock()
	r.isrTerm, r.isrRev = term, rev
	r.mu.Unlock()
	return nil
}

// stateFence reads the database's shard states from the main etcd when the
// storage cluster lives there too, and returns a compare on the key's create
// revision (the database's states, not their latest update) after checking
// it names this node leader of the shard at term.
// Nil when the cluster has its own etcd (no txn can span both).
func (r *replica) stateFence(ctx context.Context, term int64) (*kv.Cmp, error) {
	if r.h.cfg.StateStore == nil || r.h.cfg.StateStore != r.h.store {
		return nil, nil
	}
	key := r.h.cfg.StateKeys.ShardState(r.db)
	kvp, err := r.h.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if kvp == nil {
		return nil, fmt.Errorf("%w: no shard state for database %s", ErrShardGone, r.db)
	}
	var ss models.ShardStates
	if err := json.Unmarshal(kvp.Value, &ss); err != nil {
		return nil, fmt.Errorf("%w: shard state of %s unreadable: %w", ErrShardGone, r.db, err)
	}
	for _, s := range ss.Shards {
		if s.ID != r.shard {
			continue
		}
		if s.Leader != r.h.nodeID || s.Term != term {
			return nil, fmt.Errorf("%w: shard %s is led by %s at term %d in etcd", ErrStaleTerm, r.id, s.Leader, s.Term)
		}
		cmp := kv.CreateRevIs(key, kvp.CreateRev)
		return &cmp, nil
	}
	return nil, fmt.Errorf("%w: database %s has no shard %d in etcd", ErrShardGone, r.db, r.shard)
}
