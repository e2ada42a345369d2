package storage

import (
	"maps"
	"sync"

	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// FlushFailures keeps the shards of this node whose background flush is
// failing (engine.WithFlushReport), logs each failure at ERROR and each
// recovery, and gives the node record's flush_failing: the problems list
// shows them to the operator.
type FlushFailures struct {
	lg *zap.Logger
	mu sync.Mutex
	// failing maps "db/shard" to its last error, at most maxFlushFailures
	// of them, each cut to maxFlushError bytes: the node record is small.
	failing map[string]string
}

const (
	maxFlushFailures = 16
	maxFlushError    = 256
)

// NewFlushFailures reports to lg.
func NewFlushFailures(lg *zap.Logger) *FlushFailures {
	return &FlushFailures{lg: lg, failing: map[string]string{}}
}

// Report is the engine's flush report.
func (f *FlushFailures) Report(db string, shard int, err error) {
	id := models.ShardID(db, shard)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.failing, id)
		f.lg.Info("shard flushes again", zap.String("db", db), zap.Int("shard", shard))
		return
	}
	f.lg.Error("shard flush failed: its points stay in memory and in the log; writes to it fail once its memtable is full",
		zap.String("db", db), zap.Int("shard", shard), zap.Error(err))
	if _, ok := f.failing[id]; ok || len(f.failing) < maxFlushFailures {
		msg := err.Error()
		if len(msg) > maxFlushError {
			msg = msg[:maxFlushError] + "..."
		}
		f.failing[id] = msg
	}
}

// Failing is the node record's flush_failing (nil when none).
func (f *FlushFailures) Failing() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failing) == 0 {
		return nil
	}
	return maps.Clone(f.failing)
}
