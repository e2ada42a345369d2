package storage

import (
	"context"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// expireLoop seals the old time partitions of this node's replicas and
// deletes the blocks whose points a database's retention expired from
// them, every ExpireEvery, until ctx ends. Reads stopped answering those points when the retention was set
// (the broker bounds them); this gives their space back. Each replica
// expires by its own clock, leader or follower alike, so a follower that
// was away during an expiry drops the same points when it returns, and a
// full sync copies a leader that no longer holds them.
func (h *Host) expireLoop(ctx context.Context) {
	every := h.cfg.ExpireEvery
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.expireOnce(now)
		}
	}
}

// expireOnce runs one expiry pass over the replicas open now.
func (h *Host) expireOnce(now time.Time) {
	st := h.state()
	h.mu.RLock()
	reps := make([]*replica, 0, len(h.replicas))
	for _, r := range h.replicas {
		reps = append(reps, r)
	}
	h.mu.RUnlock()
	for _, r := range reps {
		db, ok := st.Databases.Get(r.db)
		if !ok || db.UID != r.uid {
			continue
		}
		// Sealed first, with a retention or without (gateParts): the
		// partitions the expiry below drops go whole.
		if sl, ok := r.eng.(engine.Sealer); ok {
			if n, err := sl.Seal(now.UnixNano()); err != nil {
				h.lg.Warn("sealing time partitions failed; retried at the next pass", zap.String("shard", r.id), zap.Error(err))
			} else if n > 0 {
				h.lg.Info("sealed time partitions", zap.String("shard", r.id), zap.Int("partitions", n))
			}
		}
		if db.Retention.D() <= 0 {
			continue // kept forever: nothing expires (and rollups need a retention)
		}
		h.syncRollups(r, db)
		h.fillRollups(r)
		h.expireRollups(r, db, now)
		ex, ok := r.eng.(engine.Expirer)
		if !ok {
			continue
		}
		cutoff := now.Add(-db.Retention.D())
		blocks, bytes, err := ex.ExpireBefore(cutoff.UnixNano())
		switch {
		case err != nil:
			h.lg.Warn("expiring points past the retention failed; retried at the next pass", zap.String("shard", r.id), zap.Error(err))
		case blocks > 0:
			h.lg.Info("expired points past the retention", zap.String("shard", r.id), zap.Time("before", cutoff),
				zap.Int("blocks", blocks), zap.Int64("bytes", bytes))
		}
	}
	h.relievePressure(now, reps)
}
