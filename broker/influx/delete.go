package influx

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/influxdata/influxql"
)

// planDelete plans DELETE, DROP SERIES and DROP MEASUREMENT; nil, false for
// any other statement. Each becomes one delete per measurement, which every
// shard of the database logs like a write (Backend.Delete): InfluxDB's
// answer, no rows, comes once all of them are durable.
func planDelete(stmt influxql.Statement) (ddl, bool) {
	var sources influxql.Sources
	var cond influxql.Expr
	allTime := true
	switch s := stmt.(type) {
	case *influxql.DropMeasurementStatement:
		sources = influxql.Sources{&influxql.Measurement{Name: s.Name}}
	case *influxql.DropSeriesStatement:
		sources, cond = s.Sources, s.Condition
	case *influxql.DeleteSeriesStatement:
		sources, cond, allTime = s.Sources, s.Condition, false
	default:
		return nil, false
	}
	return func(ctx context.Context, h *Handler, db string) ([]query.Row, error) {
		if db == "" {
			return nil, errDBRequired
		}
		del, none, err := deleteOf(cond, allTime, h.cfg.Now().UnixNano())
		if err != nil || none {
			return nil, err
		}
		names, err := h.deleteSources(ctx, db, sources)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			d := del
			d.Metric = name
			if err := h.cfg.Backend.Delete(ctx, db, &d); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}, true
}

// deleteSources names the measurements a statement deletes from: those of
// FROM, else every measurement of db.
func (h *Handler) deleteSources(ctx context.Context, db string, sources influxql.Sources) ([]string, error) {
	var names []string
	for _, src := range sources {
		m, ok := src.(*influxql.Measurement)
		if !ok || m.Regex != nil || m.Name == "" {
			return nil, fmt.Errorf("%w: deleting from %s (name the measurements)", query.ErrUnsupported, src)
		}
		names = append(names, m.Name)
	}
	if len(names) > 0 {
		return names, nil
	}
	list, err := h.cfg.Backend.SeriesKeys(ctx, db, "")
	if err != nil {
		return nil, err
	}
	for _, key := range list.Keys {
		metric, _, _, err := lineproto.ParseSeriesKey(key)
		if err != nil {
			return nil, err
		}
		names = append(names, metric)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// deleteOf reads a delete's WHERE: tag = 'value' terms and a time range
// (unless allTime: DROP SERIES takes no time), joined by AND. none: the
// condition matches nothing (a tag equal to two values, an empty range).
func deleteOf(cond influxql.Expr, allTime bool, now int64) (d wire.Delete, none bool, err error) {
	d.Min, d.Max = math.MinInt64, math.MaxInt64
	if cond == nil {
		return d, false, nil
	}
	if err := noOr(cond); err != nil {
		return d, false, err
	}
	rest, tr, err := influxql.ConditionExpr(cond, &influxql.NowValuer{Now: time.Unix(0, now).UTC()})
	if err != nil {
		return d, false, fmt.Errorf("%w: %w", query.ErrUnsupported, err)
	}
	if !tr.IsZero() {
		if allTime {
			return d, false, fmt.Errorf("%w: DROP SERIES takes no time condition (DELETE does)", query.ErrUnsupported)
		}
		if !tr.Min.IsZero() {
			d.Min = tr.Min.UnixNano()
		}
		if !tr.Max.IsZero() {
			d.Max = tr.Max.UnixNano()
		}
	}
	tags := map[string]string{}
	if none, err = tagTerms(rest, tags); err != nil {
		return d, false, err
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		d.Tags = append(d.Tags, lineproto.Tag{Key: k, Value: tags[k]})
	}
	return d, none || d.Min > d.Max, nil
}

// noOr refuses OR anywhere in a delete's condition: ConditionExpr would
// intersect time ranges across it.
func noOr(e influxql.Expr) error {
	var err error
	influxql.WalkFunc(e, func(n influxql.Node) {
		if b, ok := n.(*influxql.BinaryExpr); ok && b.Op == influxql.OR && err == nil {
			err = fmt.Errorf("%w: OR in a delete's condition (run one delete per alternative)", query.ErrUnsupported)
		}
	})
	return err
}

// tagTerms collects e's tag = 'value' terms into tags; none when one tag
// is asked two values.
func tagTerms(e influxql.Expr, tags map[string]string) (none bool, err error) {
	switch e := e.(type) {
	case nil:
		return false, nil
	case *influxql.ParenExpr:
		return tagTerms(e.Expr, tags)
	case *influxql.BinaryExpr:
		if e.Op == influxql.AND {
			l, err := tagTerms(e.LHS, tags)
			if err != nil {
				return false, err
			}
			r, err := tagTerms(e.RHS, tags)
			return l || r, err
		}
		ref, okRef := e.LHS.(*influxql.VarRef)
		lit, okLit := e.RHS.(*influxql.StringLiteral)
		if e.Op == influxql.EQ && okRef && okLit && !strings.EqualFold(ref.Val, "time") {
			if v, seen := tags[ref.Val]; seen && v != lit.Val {
				return true, nil
			}
			tags[ref.Val] = lit.Val
			return false, nil
		}
	}
	return false, fmt.Errorf("%w: condition %s in a delete (only tag = 'value' and time ranges, joined by AND)", query.ErrUnsupported, e)
}
