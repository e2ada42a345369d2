package storage

import (
	"context"
	"time"

	"github.com/cairn-db/cairn/storage/client"
	"go.uber.org/zap"
)

// leave asks the shard's current leader to drop this node from the in-sync
// set; false when it should be retried.
func (h *Host) leave(ctx context.Context, r *replica) bool {
	r.mu.Lock()
	w := r.want
	r.mu.Unlock()
	if w.role != roleFollower {
		return w.role == roleIdle // nobody to tell
	}
	// Stop fetching first: a fetch after the leader dropped us would count
	// as catching up and put us back in the set.
	h.partAll(r)
	addr, err := h.peerAddress(ctx, w.leader)
	if err != nil {
		return false
	}
	err = h.peer().Leave(ctx, client.Shard{Peer: client.Peer{ID: w.leader, Address: addr}, DB: r.db, Shard: r.shard}, w.term, h.nodeID)
	if err != nil {
		h.lg.Debug("leaving the in-sync set failed", zap.String("shard", r.id), zap.String("leader", w.leader), zap.Error(err))
	}
	return err == nil
}

// TransferFunc asks the master to move a shard's leadership to node.
type TransferFunc func(ctx context.Context, db string, shard int, node string) error

// Handoff prepares a graceful stop: every shard this node leads is handed to
// its most caught-up in-sync follower, and every shard it follows drops it
// from the in-sync set, so a rolling restart fails no write. It returns when
// done or when ctx ends.
func (h *Host) Handoff(ctx context.Context, transfer TransferFunc) {
	h.leaving.Store(true)
	h.mu.RLock()
	reps := make([]*replica, 0, len(h.replicas))
	for _, r := range h.replicas {
		reps = append(reps, r)
	}
	h.mu.RUnlock()
	var led []*replica
	for _, r := range reps {
		r.mu.Lock()
		w := r.want
		target, best := "", uint64(0)
		if w.role == roleLeader {
			for _, n := range r.ls.isr {
				if n != h.nodeID && (target == "" || r.ls.acked[n] > best) {
					target, best = n, r.ls.acked[n]
				}
			}
		}
		r.mu.Unlock()
		switch w.role {
		case roleLeader:
			if target == "" {
				continue // no in-sync follower: the shard goes offline with us
			}
			if err := transfer(ctx, r.db, r.shard, target); err != nil {
				h.lg.Warn("leadership handoff refused", zap.String("shard", r.id), zap.String("to", target), zap.Error(err))
				continue
			}
			led = append(led, r)
		case roleFollower:
			h.leave(ctx, r)
		}
	}
	// Wait until the new leaders are published and we stopped leading, then
	// leave their in-sync sets too: a new leader starts from the old set,
	// which still names us.
	for _, r := range led {
		for ctx.Err() == nil {
			r.mu.Lock()
			leading := r.want.role == roleLeader
			r.mu.Unlock()
			if !leading {
				break
			}
			r.sleep(ctx, 20*time.Millisecond)
		}
		for ctx.Err() == nil && !h.leave(ctx, r) {
			r.sleep(ctx, 50*time.Millisecond)
		}
	}
	h.lg.Info("handoff done", zap.Int("leaderships_moved", len(led)), zap.Int("replicas", len(reps)))
}
