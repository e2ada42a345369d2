package app

import (
	"os"
	"runtime/debug"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// memoryLimit is the Go runtime's soft memory limit for cfg (0: none).
// --memory-limit wins; else GOMEMLIMIT, which the runtime has applied
// already; else a storage node gets three times its memtable budget plus
// 128 MiB: room for the memtables, the frozen ones being flushed beside
// them (up to the budget again), the series indexes, the writes in flight
// and the garbage between collections, so that the heap does not settle at
// twice its live size (nor the collector run nonstop at a limit the live
// heap reaches). The limit is soft: past it the collector runs more often,
// nothing fails. Roles without memtables keep Go's default (none).
func memoryLimit(cfg config.Config, getenv func(string) string) int64 {
	switch {
	case cfg.MemoryLimit > 0:
		return cfg.MemoryLimit
	case getenv("GOMEMLIMIT") != "", !cfg.HasRole(config.RoleStorage):
		return 0
	}
	mem := cfg.MemtableMaxBytes
	if mem <= 0 {
		mem = engine.DefaultMemtableBytes()
	}
	return 3*mem + 128<<20
}

// ApplyMemoryLimit sets the runtime's soft memory limit for cfg, if any
// (memoryLimit); it is process-wide, for the binary's main to call.
func ApplyMemoryLimit(cfg config.Config, lg *zap.Logger) {
	if n := memoryLimit(cfg, os.Getenv); n > 0 {
		debug.SetMemoryLimit(n)
		lg.Info("go soft memory limit", zap.Int64("bytes", n))
	}
}
