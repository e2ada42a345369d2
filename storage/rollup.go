package storage

import (
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// syncRollups makes replica r keep db's rollup levels: when it opens and
// whenever the database's config changes (a PATCH of its rollups). Every
// replica, leader or follower, computes its cells from the points it
// flushes (engine/rollup.go), so the levels are all it needs to be told.
func (h *Host) syncRollups(r *replica, db models.Database) {
	ro, ok := r.eng.(engine.Rollups)
	if !ok || db.UID != r.uid {
		return
	}
	if err := ro.SetRollups(db.RollupIntervals()); err != nil {
		h.lg.Warn("cannot set the rollup levels; retried at the next expiry pass", zap.String("shard", r.id), zap.Error(err))
	}
}

// fillRollups computes the cells of a level added to r while it held
// points, step by step, in the expiry pass (not in the reconcile, which a
// large shard's fill would hold up).
func (h *Host) fillRollups(r *replica) {
	ro, ok := r.eng.(engine.Rollups)
	if !ok {
		return
	}
	for more := true; more; {
		var err error
		if more, err = ro.FillRollups(); err != nil {
			h.lg.Warn("filling a new rollup level failed; resumed at the next expiry pass", zap.String("shard", r.id), zap.Error(err))
			return
		}
	}
}

// expireRollups drops r's cells past each level's own retention, as
// expireOnce drops its raw points past the database's.
func (h *Host) expireRollups(r *replica, db models.Database, now time.Time) {
	ro, ok := r.eng.(engine.Rollups)
	if !ok {
		return
	}
	for _, lv := range db.Rollups {
		if lv.Retention <= 0 {
			continue
		}
		cutoff := now.Add(-lv.Retention.D())
		n, err := ro.ExpireRollup(lv.Interval.D(), cutoff.UnixNano())
		switch {
		case err != nil:
			h.lg.Warn("expiring rollup cells past their retention failed; retried at the next pass", zap.String("shard", r.id),
				zap.String("rollup", lv.Name()), zap.Error(err))
		case n > 0:
			h.lg.Info("expired rollup cells past their retention", zap.String("shard", r.id), zap.String("rollup", lv.Name()),
				zap.Time("before", cutoff), zap.Int("cells", n))
		}
	}
}
