package query

import (
	"fmt"
	"math"
	"time"

	"github.com/influxdata/influxql"
)

// Transformations over an aggregate with GROUP BY time (Grafana's rates:
// derivative(mean(v), 1s), non_negative_derivative(max(counter))): the
// aggregate is pushed to the shards as usual and the transformation runs
// on the merged, filled buckets, as InfluxDB computes it (the same float
// operations in the same order, so the same bits). Null buckets are
// skipped; a transformation that needs earlier buckets reads them from
// before the query's start (InfluxDB's extra intervals), and rows before
// the start's bucket are dropped.

// transforms maps the supported transformations to the buckets they read
// before the start (InfluxDB 1.x's extra intervals: one, moving_average's
// window included).
var transforms = map[string]int{
	"derivative": 1, "non_negative_derivative": 1, "difference": 1, "non_negative_difference": 1,
	"elapsed": 1, "moving_average": 1, "cumulative_sum": 0,
}

// Transform is a transformation applied to an aggregate output.
type Transform struct {
	Name string
	// Unit of derivative and elapsed in ns (default: the GROUP BY
	// interval for derivative, 1 ns for elapsed); N of moving_average.
	Unit int64
	N    int
}

// planTransform reads fn(agg(field)[, arg]) into out; it returns the
// number of extra buckets the transformation reads before the start.
func planTransform(e *influxql.Call, out *Output, s *influxql.SelectStatement) (int, error) {
	extra := transforms[e.Name]
	if len(e.Args) < 1 || len(e.Args) > 2 {
		return 0, fmt.Errorf("%w: invalid number of arguments for %s, expected 1 or 2, got %d", ErrBadQuery, e.Name, len(e.Args))
	}
	inner, ok := e.Args[0].(*influxql.Call)
	iv, err := s.GroupByInterval()
	if !ok {
		// Over raw points: each series' points in time order, a
		// derivative's unit 1s by default (InfluxDB's).
		ref, ok := e.Args[0].(*influxql.VarRef)
		if !ok {
			return 0, unsupported(fmt.Sprintf("%s(%s) (the argument must be a field key or an aggregate)", e.Name, e.Args[0]))
		}
		if err != nil || iv > 0 {
			return 0, fmt.Errorf("%w: aggregate function required inside the call to %s", ErrBadQuery, e.Name)
		}
		tr, err := transformArgs(e, int64(time.Second))
		if err != nil {
			return 0, err
		}
		out.Field, out.Transform = ref.Val, tr
		return 0, nil
	}
	if _, ok := aggregates[inner.Name]; !ok || inner.Name == "percentile" {
		return 0, unsupported(fmt.Sprintf("%s(%s(...))", e.Name, inner.Name))
	}
	if len(inner.Args) != 1 {
		return 0, fmt.Errorf("%w: %s() takes 1 argument, got %d", ErrBadQuery, inner.Name, len(inner.Args))
	}
	ref, ok := inner.Args[0].(*influxql.VarRef)
	if !ok {
		return 0, unsupported(fmt.Sprintf("%s(%s) (the argument must be a field key)", inner.Name, inner.Args[0]))
	}
	if err != nil || iv <= 0 {
		return 0, fmt.Errorf("%w: %s aggregate requires a GROUP BY interval", ErrBadQuery, e.Name)
	}
	tr, err := transformArgs(e, int64(iv))
	if err != nil {
		return 0, err
	}
	out.Func, out.Field, out.Transform = inner.Name, ref.Val, tr
	return extra, nil
}

// transformArgs reads a transformation's arguments after the first; unit
// is a derivative's default unit.
func transformArgs(e *influxql.Call, unit int64) (*Transform, error) {
	tr := &Transform{Name: e.Name}
	switch e.Name {
	case "derivative", "non_negative_derivative", "elapsed":
		tr.Unit = unit
		if e.Name == "elapsed" {
			tr.Unit = 1
		}
		if len(e.Args) == 2 {
			d, ok := e.Args[1].(*influxql.DurationLiteral)
			if !ok || d.Val <= 0 {
				return nil, fmt.Errorf("%w: second argument to %s must be a positive duration, got %s", ErrBadQuery, e.Name, e.Args[1])
			}
			tr.Unit = int64(d.Val)
		}
	case "moving_average":
		n, ok := e.Args[len(e.Args)-1].(*influxql.IntegerLiteral)
		if len(e.Args) != 2 || !ok || n.Val < 2 {
			return nil, fmt.Errorf("%w: moving_average window must be an integer greater than 1", ErrBadQuery)
		}
		tr.N = int(n.Val)
	default:
		if len(e.Args) != 1 {
			return nil, fmt.Errorf("%w: %s takes 1 argument, got %d", ErrBadQuery, e.Name, len(e.Args))
		}
	}
	return tr, nil
}

// transform applies o's transformation to one filled column over times
// (ascending); the rows before from are dropped.
func (tr *Transform) apply(times []int64, col []Cell, from int64) ([]int64, []Cell) {
	var outT []int64
	var outC []Cell
	emit := func(t int64, c Cell) {
		if t >= from {
			outT, outC = append(outT, t), append(outC, c)
		}
	}
	prev := -1
	var sum Cell
	window := make([]Cell, 0, tr.N)
	pos := 0
	for k, c := range col {
		if c.Kind == CellNull {
			continue
		}
		switch tr.Name {
		case "derivative", "non_negative_derivative":
			if prev >= 0 {
				diff := sub(c, col[prev]).float()
				v := diff / (float64(times[k]-times[prev]) / float64(tr.Unit))
				if tr.Name == "derivative" || diff >= 0 {
					emit(times[k], floatCell(v))
				}
			}
		case "difference", "non_negative_difference":
			if prev >= 0 {
				if d := sub(c, col[prev]); tr.Name == "difference" || d.float() >= 0 {
					emit(times[k], d)
				}
			}
		case "elapsed":
			if prev >= 0 {
				emit(times[k], Cell{Kind: CellInt, I: (times[k] - times[prev]) / tr.Unit})
			}
		case "cumulative_sum":
			if len(outT) == 0 && sum.Kind == CellNull {
				sum = c
			} else {
				sum = add(sum, c)
			}
			emit(times[k], sum)
		case "moving_average":
			if len(window) < tr.N {
				window = append(window, c)
			} else {
				sum = sub(sum, window[pos])
				window[pos] = c
			}
			if sum.Kind == CellNull {
				sum = c
			} else {
				sum = add(sum, c)
			}
			if pos++; pos >= tr.N {
				pos = 0
			}
			if len(window) == tr.N {
				emit(times[k], floatCell(sum.float()/float64(tr.N)))
			}
		}
		prev = k
	}
	return outT, outC
}

// applyRaw applies the transformation to raw rows [time, value] in the
// order given (ORDER BY time DESC walks them backwards, as InfluxDB does).
func (tr *Transform) applyRaw(values [][]any) [][]any {
	times := make([]int64, len(values))
	col := make([]Cell, len(values))
	for i, v := range values {
		times[i] = v[0].(int64)
		if f, ok := v[1].(float64); ok {
			col[i] = floatCell(f)
		}
	}
	times, col = tr.apply(times, col, math.MinInt64)
	out := make([][]any, len(times))
	for i, t := range times {
		out[i] = []any{t, col[i].Any()}
	}
	return out
}

// sub is a - b: an integer when both are, else a float.
func sub(a, b Cell) Cell {
	if a.Kind == CellInt && b.Kind == CellInt {
		return Cell{Kind: CellInt, I: a.I - b.I}
	}
	return floatCell(a.float() - b.float())
}

// add is a + b: an integer when both are, else a float.
func add(a, b Cell) Cell {
	if a.Kind == CellInt && b.Kind == CellInt {
		return Cell{Kind: CellInt, I: a.I + b.I}
	}
	return floatCell(a.float() + b.float())
}
