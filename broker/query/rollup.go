package query

import (
	"fmt"
	"math"
	"time"

	"github.com/cairn-db/cairn/models"
)

// RollupSource is the read side of a shard's rollup levels: Scan over the
// cells of the level of interval whose start is in [start, end].
type RollupSource interface {
	ScanRollup(interval time.Duration, metric string, match map[string]string, start, end int64,
		keep func(key string) bool, visit func(key string, cells []models.RollupCell) error) error
}

// rollupStats are the statistics a rollup cell holds, with the functions a
// level must list for each (every partial needs count).
var rollupStats = []struct {
	st  Stats
	fns []string
}{{StatSum, []string{"sum"}}, {StatMinMax, []string{"min", "max"}}, {StatFirst, []string{"first"}}, {StatLast, []string{"last"}}}

// rollupAnswers says whether level r holds what req needs.
func rollupAnswers(r models.Rollup, req *ShardRequest) bool {
	iv := r.Interval.D().Nanoseconds()
	if iv <= 0 || req.Interval%iv != 0 || floorMod(req.Offset, iv) != 0 || !r.Has("count") {
		return false
	}
	rest := req.Stats
	for _, s := range rollupStats {
		if req.Stats&s.st == 0 {
			continue
		}
		rest &^= s.st
		for _, fn := range s.fns {
			if !r.Has(fn) {
				return false
			}
		}
	}
	return rest == 0
}

// PlanRollup is req as the shards get it when a rollup level answers the
// part of its range older than rawFrom (the oldest time the raw points are
// kept, at now), or req itself with false when none does: an aggregate
// request grouped by a time interval that is a multiple of the level's (and
// aligned to it), asking only for what its cells hold (count, sum, mean,
// min, max, first, last, spread, as the level lists them), with no
// condition on fields. The finest level still holding req's start is
// chosen, else the one kept longest; the range is cut to the chosen level's
// retention. Cells are whole intervals: the range's start and the first
// raw time (RollupUntil) are rounded up to the level's interval, and the
// shards leave out a cell that ends past the range's end.
func PlanRollup(req *ShardRequest, levels []models.Rollup, rawFrom int64, now time.Time) (*ShardRequest, bool) {
	if req.Raw || req.Bounds || req.Interval <= 0 || req.Start >= rawFrom || len(levels) == 0 {
		return req, false
	}
	if cond, err := ParseCond(req.Cond); err != nil || len(CondFields(cond)) > 0 {
		return req, false
	}
	var best *models.Rollup
	for i := range levels {
		r := &levels[i]
		if !rollupAnswers(*r, req) {
			continue
		}
		holds := r.Retention == 0 || now.Add(-r.Retention.D()).UnixNano() <= req.Start
		if holds {
			best = r
			break
		}
		if best == nil || best.Retention != 0 && (r.Retention == 0 || r.Retention > best.Retention) {
			best = r
		}
	}
	if best == nil {
		return req, false
	}
	iv := best.Interval.D().Nanoseconds()
	out := *req
	out.Rollup = iv
	out.RollupUntil = ceilTo(rawFrom, iv)
	start := req.Start
	if best.Retention > 0 {
		start = max(start, now.Add(-best.Retention.D()).UnixNano())
	}
	out.Start = ceilTo(start, iv)
	return &out, true
}

// ceilTo is ts rounded up to a multiple of iv (math.MaxInt64 past the last).
func ceilTo(ts, iv int64) int64 {
	m := floorMod(ts, iv)
	if m == 0 {
		return ts
	}
	if up := iv - m; ts <= math.MaxInt64-up {
		return ts + up
	}
	return math.MaxInt64
}

// evaluateRollup answers the part of req's range before RollupUntil from
// the level's cells, and the rest from the raw points.
func (ev *evaluator) evaluateRollup(src Source) error {
	rs, ok := src.(RollupSource)
	if !ok {
		return fmt.Errorf("%w: this shard keeps no rollups", ErrUnsupported)
	}
	req := ev.req
	if req.Interval <= 0 || req.Interval%req.Rollup != 0 || floorMod(req.Offset, req.Rollup) != 0 {
		return fmt.Errorf("%w: a rollup of %s cannot answer GROUP BY time(%s) with offset %s", ErrBadQuery,
			time.Duration(req.Rollup), time.Duration(req.Interval), time.Duration(req.Offset))
	}
	// Cells are whole intervals: only those that end within the range
	// answer (PlanRollup rounded its start up), so no point outside it is.
	lastCell := floorDiv(req.End-req.Rollup+1, req.Rollup) * req.Rollup
	if until := min(lastCell, req.RollupUntil-1); req.Start <= until {
		err := ev.eachField(func(match map[string]string) error {
			return rs.ScanRollup(time.Duration(req.Rollup), req.Measurement, match, req.Start, until, ev.keep, ev.visitCells)
		})
		if err != nil {
			return err
		}
	}
	if from := max(req.Start, req.RollupUntil); from <= req.End {
		return ev.eachField(func(match map[string]string) error {
			return src.Scan(req.Measurement, match, from, req.End, ev.keep, ev.visit)
		})
	}
	return nil
}

// visitCells folds one series' cells into its group's buckets: a cell lies
// in one bucket, as the interval is a multiple of the level's.
func (ev *evaluator) visitCells(key string, cells []models.RollupCell) error {
	if ev.err != nil {
		return ev.err
	}
	si := ev.series[key]
	if si == nil || len(cells) == 0 {
		return nil
	}
	if si.acc == nil {
		si.acc = ev.groupOf(si).fieldAcc(si.field)
		si.acc.typ = cells[0].Type
	}
	fa := si.acc
	if err := ev.cover(fa, ev.num(cells[0].Start), ev.num(cells[len(cells)-1].Start)); err != nil {
		ev.err = err
		return err
	}
	for _, c := range cells {
		i := ev.num(c.Start) - fa.lo
		if i < 0 || i >= int64(len(fa.parts)) {
			ev.err = fmt.Errorf("%w: a cell at %d is outside [%d, %d]", ErrCorrupt, c.Start, ev.req.Start, ev.req.End)
			return ev.err
		}
		p := Partial{Count: c.Count, Sum: c.Sum}
		if ev.extra {
			p.X = &Extra{Min: c.Min, Max: c.Max, MinTS: c.MinTS, MaxTS: c.MaxTS,
				First: c.First, Last: c.Last, FirstTS: c.FirstTS, LastTS: c.LastTS}
		}
		fa.parts[i].Merge(&p)
	}
	return nil
}
