package storage

import (
	"math"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// Disk pressure (--retention-max-disk-pct): when the data dir's file system
// is fuller than the limit, each expiry pass deletes the oldest blocks of
// the node's shards, an hour of points at a time from the oldest block on,
// until it is under the limit or no block is left, and the node's record
// says so (disk_pressure: the warning problem retention_disk_pressure).
// Replicas delete by their own disk, as for the retention: a follower on a
// fuller disk keeps less than its leader.

const (
	// pressureStep is the span of points the first round deletes; a round
	// that deletes no block (blocks spanning more) doubles it.
	pressureStep = time.Hour
	// pressureRounds bounds one pass: the rest waits for the next.
	pressureRounds = 64
	// pressureShown is how long the record keeps the last deletion.
	pressureShown = time.Hour
)

// relieve deletes the oldest blocks of shards until usage() is at most
// limit or they hold none: the blocks deleted and the last cutoff (every
// deleted block held only points before it; 0: none deleted).
func relieve(shards []engine.Expirer, usage func() int, limit int) (blocks int, before int64, err error) {
	step := int64(pressureStep)
	for round := 0; round < pressureRounds && usage() > limit; round++ {
		oldest, any := int64(math.MaxInt64), false
		for _, s := range shards {
			ts, ok, err := s.OldestBlock()
			if err != nil {
				return blocks, before, err
			}
			if ok {
				oldest, any = min(oldest, ts), true
			}
		}
		if !any {
			break
		}
		cut := oldest + step
		if cut < oldest { // past the end of time: everything
			cut = math.MaxInt64
		}
		n := 0
		for _, s := range shards {
			dropped, _, err := s.ExpireBefore(cut)
			if err != nil {
				return blocks, before, err
			}
			n += dropped
		}
		if n == 0 {
			step *= 2
			continue
		}
		blocks, before = blocks+n, cut
	}
	return blocks, before, nil
}

// relievePressure runs relieve over the replicas of a pass when the disk
// is past the limit, and keeps what it did for the record.
func (h *Host) relievePressure(now time.Time, reps []*replica) {
	limit := h.cfg.MaxDiskPct
	if limit <= 0 || h.cfg.DiskUsage == nil {
		return
	}
	used := h.cfg.DiskUsage()
	if used <= limit {
		if p := h.pressure.Load(); p != nil && now.Sub(time.UnixMilli(p.At)) > pressureShown {
			h.pressure.Store(nil)
		}
		return
	}
	var shards []engine.Expirer
	for _, r := range reps {
		if ex, ok := r.eng.(engine.Expirer); ok {
			shards = append(shards, ex)
		}
	}
	blocks, before, err := relieve(shards, h.cfg.DiskUsage, limit)
	if err != nil {
		h.lg.Warn("deleting the oldest blocks under disk pressure failed; retried at the next pass", zap.Int("limit_pct", limit), zap.Error(err))
	}
	if blocks == 0 {
		return
	}
	h.pressure.Store(&models.DiskPressure{LimitPct: limit, UsedPct: used, Blocks: blocks, Before: before, At: now.UnixMilli()})
	h.lg.Warn("data disk past --retention-max-disk-pct: deleted the oldest blocks", zap.Int("used_pct", used), zap.Int("limit_pct", limit),
		zap.Int("blocks", blocks), zap.Time("before", time.Unix(0, before)), zap.Int("now_pct", h.cfg.DiskUsage()))
}

// DiskPressure is the record's disk_pressure: the last deletion of old
// blocks under disk pressure, within the last hour; nil when none.
func (h *Host) DiskPressure() *models.DiskPressure { return h.pressure.Load() }
