package query

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/influxdata/influxql"
)

// MaxBuckets bounds the time buckets of one series of a GROUP BY time query.
const MaxBuckets = 100_000

// aggregates maps the supported aggregate functions to the statistics they need.
var aggregates = map[string]Stats{
	"count":      0,
	"sum":        StatSum,
	"mean":       StatSum,
	"min":        StatMinMax,
	"max":        StatMinMax,
	"spread":     StatMinMax,
	"first":      StatFirst,
	"last":       StatLast,
	"stddev":     StatSum | StatM2,
	"median":     StatValues,
	"percentile": StatValues,
}

// selectors are aggregates that pick one point: without GROUP BY time, a
// statement with one of them alone reports that point's time, as InfluxDB does.
var selectors = map[string]bool{"min": true, "max": true, "first": true, "last": true}

// Output is one column of a SELECT after time.
type Output struct {
	Name  string
	Func  string // aggregate; "" for a raw field or tag
	Field string // the field read (aggregate argument or raw column); "*" every field (count(*))
	// Match: the fields a "*" argument reads (count(/regex/)); nil for all.
	Match *regexp.Regexp
	N     float64 // percentile's N
	// Tag: a raw column that is a tag (typed ::tag); otherwise a raw column
	// is a field if any series has that field, else a tag.
	Tag bool
	// Transform applied to the aggregate after the merge (derivative...).
	Transform *Transform
	// Top: top() or bottom() over the raw points of Field (topn.go).
	Top *topSpec
	// Math over the aggregate (mean(value)*100), applied after the merge.
	Math influxql.Expr
}

// Plan is a SELECT statement ready to run: the request every shard gets and
// what the broker does with the answers.
type Plan struct {
	// DB is the database named in FROM ("" = the request's).
	DB      string
	Req     ShardRequest
	Outputs []Output
	// Wildcard: SELECT * (raw); the columns are the fields and tags found.
	Wildcard        bool
	Fill            influxql.FillOption
	FillValue       any
	Limit, Offset   int
	SLimit, SOffset int
	Desc            bool
	// Grouped: the result series carry tags (GROUP BY tags or *).
	Grouped bool
	// Location is tz()'s zone: buckets start at its round times and RFC
	// 3339 times are written in it; nil: UTC.
	Location *time.Location
	// sources: FROM when it names several measurements or a regex
	// (sources.go); nil when Req.Measurement is the one.
	sources []*influxql.Measurement
	// Sub is the subquery p reads (FROM (SELECT ...)), run first; p then
	// runs on the broker over its rows (subquery.go).
	Sub *Plan
	// Local is the request the broker evaluates itself over the raw points
	// Req asks the shards for (a condition on several fields: fieldcond.go).
	Local *ShardRequest
	// extra buckets a transformation reads before the start; From is the
	// first bucket answered (the start's) when a transformation moved
	// Req.Start back.
	extra int
	From  int64
}

// PlanSelect turns a parsed SELECT into a plan; now resolves now() and the
// default end of GROUP BY time queries. Unsupported features are ErrUnsupported
// naming the feature.
func PlanSelect(s *influxql.SelectStatement, now time.Time) (*Plan, error) {
	switch {
	case s.Target != nil:
		return nil, unsupported("SELECT ... INTO")
	}
	p := &Plan{
		Location: s.Location,
		Limit:    s.Limit,
		Offset:   s.Offset,
		SLimit:   s.SLimit, SOffset: s.SOffset,
		Fill:      s.Fill,
		FillValue: s.FillValue,
	}
	if err := p.planSources(s.Sources, now); err != nil {
		return nil, err
	}
	for _, f := range s.SortFields {
		if f.Name != "time" && f.Name != "" {
			return nil, unsupported("ORDER BY " + f.Name + " (only ORDER BY time)")
		}
		p.Desc = !f.Ascending
	}
	if err := p.planFields(s); err != nil {
		return nil, err
	}
	if err := p.planDimensions(s); err != nil {
		return nil, err
	}
	p.planRawPercentile()
	if err := p.planRawSet(); err != nil {
		return nil, err
	}
	cond, start, end, err := SplitTime(s.Condition, now)
	if err != nil {
		return nil, err
	}
	if cond != nil {
		p.Req.Cond = cond.String()
	}
	if p.Req.Interval > 0 {
		if start == math.MinInt64 {
			return nil, fmt.Errorf("%w: aggregate functions with GROUP BY time require a WHERE time clause with a lower limit", ErrBadQuery)
		}
		if p.Location != nil {
			// Buckets start at the zone's round times: its offset at the
			// start moves them (a change of offset within the range, as
			// at a daylight saving change, does not: a documented difference).
			_, zone := time.Unix(0, start).In(p.Location).Zone()
			p.Req.Offset = floorMod(p.Req.Offset-int64(zone)*int64(time.Second), p.Req.Interval)
		}
		if end == math.MaxInt64 {
			end = now.UnixNano()
		}
		if n := (BucketOf(end, start, p.Req.Interval, p.Req.Offset)-BucketOf(start, start, p.Req.Interval, p.Req.Offset))/p.Req.Interval + 1; n > MaxBuckets {
			return nil, fmt.Errorf("%w: GROUP BY time(%s) over that range makes %d buckets per series (at most %d)", ErrTooLarge, time.Duration(p.Req.Interval), n, MaxBuckets)
		}
	}
	if p.extra > 0 {
		if p.Desc {
			return nil, unsupported("ORDER BY time DESC with " + p.Outputs[0].Transform.Name + "()")
		}
		p.From = BucketOf(start, start, p.Req.Interval, p.Req.Offset)
		start -= int64(p.extra) * p.Req.Interval
	}
	p.Req.Start, p.Req.End = start, end
	if start > end {
		p.Req.Start, p.Req.End = 1, 0 // an empty range: every shard answers nothing
	}
	switch p.Fill {
	case influxql.NumberFill:
		switch v := p.FillValue.(type) {
		case int64:
			p.FillValue = float64(v)
		case float64:
		default:
			return nil, unsupported(fmt.Sprintf("fill(%v)", v))
		}
	}
	if len(CondFields(cond)) > 0 {
		p.planFieldCond(cond)
	}
	return p, nil
}

// floorMod is a mod m in [0, m).
func floorMod(a, m int64) int64 {
	return a - floorDiv(a, m)*m
}

func unsupported(feature string) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, feature)
}

func (p *Plan) planFields(s *influxql.SelectStatement) error {
	names := s.ColumnNames()[1:]
	fields := map[string]bool{}
	aggs, raws := 0, 0
	for i, f := range s.Fields {
		out := Output{Name: names[i]}
		switch e := f.Expr.(type) {
		case *influxql.Wildcard:
			if len(s.Fields) != 1 {
				return unsupported("* beside other columns")
			}
			p.Wildcard, p.Req.AllFields = true, true
			raws++
			continue
		case *influxql.VarRef:
			raws++
			out.Field = e.Val
			out.Tag = e.Type == influxql.Tag
			if e.Val == "time" {
				return unsupported("selecting time explicitly")
			}
			if !out.Tag {
				fields[e.Val] = true
			}
		case *influxql.BinaryExpr, *influxql.ParenExpr:
			call, err := planMath(e)
			if err != nil {
				return err
			}
			out.Math = e
			if err := p.planAggregate(call, &out, fields); err != nil {
				return err
			}
			aggs++
		case *influxql.Call:
			if _, ok := transforms[e.Name]; ok {
				if len(s.Fields) != 1 {
					return unsupported(e.Name + "() beside other columns")
				}
				extra, err := planTransform(e, &out, s)
				if err != nil {
					return err
				}
				p.extra = extra
				fields[out.Field] = true
				p.Req.Stats |= aggregates[out.Func]
				if out.Func == "" { // over raw points
					raws++
				} else {
					aggs++
				}
				break
			}
			if e.Name == "distinct" || e.Name == "sample" {
				if err := planSet(e, &out, s); err != nil {
					return err
				}
				fields[out.Field] = true
				aggs++
				break
			}
			if e.Name == "top" || e.Name == "bottom" {
				if len(s.Fields) != 1 {
					return unsupported(e.Name + "() beside other columns")
				}
				tags, err := planTop(e, &out)
				if err != nil {
					return err
				}
				if s.Limit > 0 && out.Top.n > s.Limit {
					return fmt.Errorf("%w: limit (%d) in %s function can not be larger than the LIMIT (%d) in the select statement", ErrBadQuery, out.Top.n, e.Name, s.Limit)
				}
				fields[out.Field] = true
				p.Outputs = append(p.Outputs, out)
				p.Outputs = append(p.Outputs, tags...)
				raws++
				continue
			}
			aggs++
			if err := p.planAggregate(e, &out, fields); err != nil {
				return err
			}
		default:
			return unsupported(fmt.Sprintf("the expression %s in SELECT (only field keys, tag keys, * and single aggregate calls)", f.Expr))
		}
		p.Outputs = append(p.Outputs, out)
	}
	if aggs > 0 && raws > 0 {
		return fmt.Errorf("%w: mixing aggregate and non-aggregate queries", ErrUnsupported)
	}
	p.Req.Raw = aggs == 0
	p.Req.Fields = slices.Sorted(maps.Keys(fields))
	return nil
}

// planAggregate reads one aggregate call into out and the request.
func (p *Plan) planAggregate(e *influxql.Call, out *Output, fields map[string]bool) error {
	st, ok := aggregates[e.Name]
	if !ok {
		return unsupported(e.Name + "()")
	}
	out.Func = e.Name
	want := 1
	if e.Name == "percentile" {
		want = 2
	}
	if len(e.Args) != want {
		return fmt.Errorf("%w: %s() takes %d argument(s), got %d", ErrBadQuery, e.Name, want, len(e.Args))
	}
	ref, err := p.planArgument(e, out)
	if err != nil {
		return err
	}
	if out.Func == "count_distinct" {
		st = StatValues
	}
	if e.Name == "percentile" {
		switch n := e.Args[1].(type) {
		case *influxql.IntegerLiteral:
			out.N = float64(n.Val)
		case *influxql.NumberLiteral:
			out.N = n.Val
		default:
			return fmt.Errorf("%w: percentile's N must be a number, got %s", ErrBadQuery, e.Args[1])
		}
		if out.N < 0 || out.N > 100 {
			return fmt.Errorf("%w: percentile's N must be in [0, 100], got %v", ErrBadQuery, out.N)
		}
	}
	if ref != nil {
		out.Field = ref.Val
		fields[ref.Val] = true
	}
	p.Req.Stats |= st
	return nil
}

func (p *Plan) planDimensions(s *influxql.SelectStatement) error {
	tags := map[string]bool{}
	for _, d := range s.Dimensions {
		switch e := d.Expr.(type) {
		case *influxql.Call:
			if e.Name != "time" {
				return unsupported("GROUP BY " + e.String())
			}
			if p.Req.Raw && (len(p.Outputs) == 0 || p.Outputs[0].Top == nil) {
				return fmt.Errorf("%w: GROUP BY requires at least one aggregate function", ErrBadQuery)
			}
			iv, err := s.GroupByInterval()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBadQuery, err)
			}
			if iv <= 0 {
				return fmt.Errorf("%w: GROUP BY time interval must be positive", ErrBadQuery)
			}
			off, err := s.GroupByOffset()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBadQuery, err)
			}
			p.Req.Interval, p.Req.Offset = int64(iv), int64(off)
		case *influxql.VarRef:
			tags[e.Val] = true
		case *influxql.Wildcard:
			p.Req.GroupAll = true
		default:
			return unsupported("GROUP BY " + d.String())
		}
	}
	if !p.Req.GroupAll {
		p.Req.GroupBy = slices.Sorted(maps.Keys(tags))
	}
	p.Grouped = p.Req.GroupAll || len(p.Req.GroupBy) > 0
	return nil
}

// SplitTime takes the time bounds out of a WHERE condition: what is left is
// the tag and field condition. Bounds must sit in the condition's top-level AND; they
// are inclusive unix ns, math.MinInt64 / MaxInt64 when absent.
func SplitTime(cond influxql.Expr, now time.Time) (influxql.Expr, int64, int64, error) {
	start, end := int64(math.MinInt64), int64(math.MaxInt64)
	var rest influxql.Expr
	var walk func(e influxql.Expr) error
	walk = func(e influxql.Expr) error {
		if pe, ok := e.(*influxql.ParenExpr); ok && isAnd(pe.Expr) {
			return walk(pe.Expr)
		}
		be, ok := e.(*influxql.BinaryExpr)
		if ok && be.Op == influxql.AND {
			if err := walk(be.LHS); err != nil {
				return err
			}
			return walk(be.RHS)
		}
		if ok && (isTime(be.LHS) || isTime(be.RHS)) {
			lo, hi, err := timeBound(be, now)
			if err != nil {
				return err
			}
			start, end = max(start, lo), min(end, hi)
			return nil
		}
		if pe, ok := e.(*influxql.ParenExpr); ok {
			if be, ok := pe.Expr.(*influxql.BinaryExpr); ok && (isTime(be.LHS) || isTime(be.RHS)) {
				return walk(be)
			}
		}
		if err := CheckCond(e); err != nil {
			return err
		}
		if rest == nil {
			rest = e
		} else {
			rest = &influxql.BinaryExpr{Op: influxql.AND, LHS: rest, RHS: e}
		}
		return nil
	}
	if cond != nil {
		if err := walk(cond); err != nil {
			return nil, 0, 0, err
		}
	}
	return rest, start, end, nil
}

func isAnd(e influxql.Expr) bool {
	be, ok := e.(*influxql.BinaryExpr)
	return ok && be.Op == influxql.AND
}

func isTime(e influxql.Expr) bool {
	ref, ok := e.(*influxql.VarRef)
	return ok && ref.Val == "time"
}

// timeBound turns `time OP value` (or `value OP time`) into an inclusive range.
func timeBound(be *influxql.BinaryExpr, now time.Time) (int64, int64, error) {
	op, val := be.Op, be.RHS
	if !isTime(be.LHS) {
		val = be.LHS
		switch op { // value OP time  ==  time OP' value
		case influxql.LT:
			op = influxql.GT
		case influxql.LTE:
			op = influxql.GTE
		case influxql.GT:
			op = influxql.LT
		case influxql.GTE:
			op = influxql.LTE
		}
	}
	ts, err := timeValue(influxql.Reduce(val, &influxql.NowValuer{Now: now}))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", ErrBadQuery, be, err)
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch op {
	case influxql.GT:
		lo = ts + 1
	case influxql.GTE:
		lo = ts
	case influxql.LT:
		hi = ts - 1
	case influxql.LTE:
		hi = ts
	case influxql.EQ:
		lo, hi = ts, ts
	default:
		return 0, 0, unsupported(fmt.Sprintf("the time comparison %s (use >, >=, <, <=, =)", be))
	}
	return lo, hi, nil
}

func timeValue(e influxql.Expr) (int64, error) {
	switch v := e.(type) {
	case *influxql.TimeLiteral:
		return v.Val.UnixNano(), nil
	case *influxql.IntegerLiteral:
		return v.Val, nil
	case *influxql.NumberLiteral:
		return int64(v.Val), nil
	case *influxql.DurationLiteral:
		return int64(v.Val), nil
	case *influxql.StringLiteral:
		t, err := v.ToTimeLiteral(time.UTC)
		if err != nil {
			return 0, err
		}
		return t.Val.UnixNano(), nil
	}
	return 0, fmt.Errorf("not a time: %s", e)
}
