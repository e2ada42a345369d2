package app

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// memoryLimit is the Go runtime's soft memory limit for cfg at start (0:
// none), and whether it is derived (then it follows the series index, see
// derivedLimit). --memory-limit wins; else GOMEMLIMIT, which the runtime
// has applied already; else a storage node gets derivedLimit of an empty
// index. Roles without memtables keep Go's default (none).
func memoryLimit(cfg config.Config, getenv func(string) string) (limit int64, derived bool) {
	switch {
	case cfg.MemoryLimit > 0:
		return cfg.MemoryLimit, false
	case getenv("GOMEMLIMIT") != "", !cfg.HasRole(config.RoleStorage):
		return 0, false
	}
	return derivedLimit(memtableBudget(cfg), cfg.InflightWriteBytes(), engine.MemoryUse{}), true
}

func memtableBudget(cfg config.Config) int64 {
	if cfg.MemtableMaxBytes > 0 {
		return cfg.MemtableMaxBytes
	}
	return engine.DefaultMemtableBytes()
}

// derivedLimit is a storage node's soft memory limit: three times what
// its active memtables may hold plus 128 MiB (the memtables, the frozen
// ones being flushed beside them and the garbage between collections),
// plus twice the series indexes, plus what the writes in flight may hold:
// writeHeldPerBody times the write bodies a node takes at once (--write-
// max-inflight-bytes). The memtables are bounded by the budget plus the
// indexes (room for each indexed series once, engine.MemoryUse), past
// which writers wait for flushes: that is what pushes back on writers. The
// indexes are not: they grow with the series a node holds, and a fixed
// limit that a million series' index reaches left the collector running
// nonstop (issue 21). So the limit follows them, and the heap keeps as
// much room for garbage above them as GOGC would give. The writes in
// flight are live too: 32 senders of 5,000-point batches held the heap at
// a limit without them while new series arrived, and the collector then
// took most of the CPU the writes needed (issue 21). The limit is soft:
// past it the collector runs more often, nothing fails.
func derivedLimit(budget, writes int64, use engine.MemoryUse) int64 {
	return 3*(budget+use.Index) + 2*use.Index + 128<<20 + writeHeldPerBody*writes
}

// writeHeldPerBody is what a write in flight holds per byte of its body:
// the body, its points parsed, split per shard and encoded for the log.
const writeHeldPerBody = 6

// ApplyMemoryLimit sets the runtime's soft memory limit for cfg, if any
// (memoryLimit); it is process-wide, for the binary's main to call, before
// Start. A derived limit then follows the node's series indexes (see
// GovernMemoryLimit).
func ApplyMemoryLimit(cfg config.Config, lg *zap.Logger) (derived bool) {
	n, derived := memoryLimit(cfg, os.Getenv)
	if n > 0 {
		debug.SetMemoryLimit(n)
		lg.Info("go soft memory limit", zap.Int64("bytes", n), zap.Bool("follows_series_index", derived))
	}
	return derived
}

// GovernMemoryLimit keeps the runtime's soft memory limit at derivedLimit
// of the engine's accounted memory until the node stops, and, unless GOGC
// is set, the GC percent at gcPercent of the live heap: looked at each
// second while the series indexes grow, less often while they stay the
// same (governWait). Process-wide, like ApplyMemoryLimit: for the binary's
// main, when that said the limit is derived. Nothing without the storage
// role.
func (a *App) GovernMemoryLimit() {
	rep, ok := a.engine.(engine.MemoryReporter)
	if !ok {
		return
	}
	g := newGovernor(memtableBudget(a.cfg), a.cfg.InflightWriteBytes(), os.Getenv("GOGC") == "", a.lg)
	a.goRun(a.runCtx, func(ctx context.Context) {
		t := time.NewTimer(governEvery)
		defer t.Stop()
		wait, index := governEvery, int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			use := rep.MemoryUse()
			wait, index = governWait(wait, index != use.Index), use.Index
			t.Reset(wait)
			g.look(use)
		}
	})
}

// governor is the memory governor's state and its hands on the runtime
// (replaced by tests: the runtime's settings are process-wide).
type governor struct {
	budget, writes int64
	tunePercent    bool  // GOGC unset: the governor sets the GC percent
	room           int64 // gcPercent's: the derived limit of an empty node
	limit          int64
	percent        int
	lg             *zap.Logger

	liveHeap   func() int64
	setLimit   func(int64)
	setPercent func(int)
}

func newGovernor(budget, writes int64, tunePercent bool, lg *zap.Logger) *governor {
	g := &governor{budget: budget, writes: writes, tunePercent: tunePercent,
		room: derivedLimit(budget, writes, engine.MemoryUse{}), percent: 100,
		lg: lg, liveHeap: liveHeap, setLimit: func(n int64) { debug.SetMemoryLimit(n) },
		setPercent: func(p int) { debug.SetGCPercent(p) }}
	g.limit = g.room
	return g
}

// look brings the limit and the GC percent up to date with use. The limit
// moves only by 1/64 or more, the percent in steps of gcPercentStep: each
// change makes the runtime recompute its pacing. The node starts at 100
// (GOGC unset).
func (g *governor) look(use engine.MemoryUse) {
	if n := derivedLimit(g.budget, g.writes, use); n > g.limit+g.limit/64 || n < g.limit-g.limit/64 {
		g.setLimit(n)
		g.limit = n
	}
	if !g.tunePercent {
		return
	}
	live := g.liveHeap()
	if p := gcPercent(live, g.room); p != g.percent {
		g.setPercent(p)
		g.percent = p
		g.lg.Debug("gc percent", zap.Int("percent", p), zap.Int64("live_heap", live), zap.Int64("room", g.room))
	}
}

// gcPercent is the GC percent of a node whose soft memory limit is
// derived, for its live heap: the highest percent up to gcPercentMax, in
// steps of gcPercentStep, whose heap goal (the live heap times 1 +
// percent/100) stays within room, the derived limit of an empty node (its
// memtables and writes in flight); never under Go's default 100.
//
// Collections are what the write path's slowest rounds meet (issue 21: at
// +160k series from 32 senders, GOGC 200 halved the GC's CPU share and took
// the p99 from 218 to 194 ms), and a higher percent trades memory for fewer
// of them. So while the live heap is small the node spends on them the room
// its limit keeps from the start, and no more: the goal stays under
// max(room, twice the live heap), so the percent never takes the heap past
// what an empty node may hold or what GOGC 100 gives. The room the limit
// adds for the series indexes is theirs: a node whose indexes filled it
// (a million series, live heap ~450 MiB) runs at 100 as before, where a
// flat 200 took it from 1.13 to 1.47 GiB, peak 1.6, and no faster. The
// limit stays the backstop: the runtime never lets the goal pass it.
func gcPercent(live, room int64) int {
	if live <= 0 {
		return gcPercentMax
	}
	p := int(min(100*room/live-100, gcPercentMax))
	return max(p-p%gcPercentStep, 100)
}

// The GC percent's bounds (gcPercent): up to 200, as measured at +160k
// series, in steps of 20 (each change makes the runtime recompute its
// pacing).
const (
	gcPercentMax  = 200
	gcPercentStep = 20
)

// liveHeap is the runtime's live heap as of its last collection.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// The memory governor's bounds: it looks each governEvery while the series
// indexes (all the derived limit follows) grow, and backs off to
// governIdleEvery while they do not: an idle node then wakes for it once
// every few seconds instead of each second. A burst of new series is seen
// within governIdleEvery, and each second from then on while it lasts; the
// limit is soft, so being late only costs collections, never a failure.
const (
	governEvery     = time.Second
	governIdleEvery = 8 * time.Second
)

// governWait is the wait before the governor's next look: governEvery when
// the indexes moved since the last, else twice the last wait, up to
// governIdleEvery.
func governWait(last time.Duration, moved bool) time.Duration {
	if moved {
		return governEvery
	}
	return min(2*last, governIdleEvery)
}

// registerEngineMemory exports the engine's accounted memory by kind.
func (a *App) registerEngineMemory() {
	rep, ok := a.engine.(engine.MemoryReporter)
	if !ok {
		return
	}
	for kind, get := range map[string]func(engine.MemoryUse) int64{
		"memtables": func(u engine.MemoryUse) int64 { return u.Memtables },
		"frozen":    func(u engine.MemoryUse) int64 { return u.Frozen },
		"index":     func(u engine.MemoryUse) int64 { return u.Index },
	} {
		a.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_engine_memory_bytes",
			Help:        "The storage engine's accounted heap by kind: active memtables (bounded by the budget), frozen ones being flushed, series indexes.",
			ConstLabels: prometheus.Labels{"kind": kind}}, func() float64 { return float64(get(rep.MemoryUse())) }))
	}
}
