package query

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/influxdata/influxql"
)

// distinct(f) and sample(f, N) answer several rows per group and time
// interval from its raw points: they read the raw points (the raw-point
// bound applies) and pick on the broker, per GROUP BY time interval when
// there is one. distinct's rows carry the interval's start (the range's
// start without GROUP BY time, as InfluxDB does) and its values in the
// order of their first point's time, then value; sample's rows are N of the
// points chosen at random (all of them when there are no more than N), at
// their own times.

// MaxSampleN bounds sample's N.
const MaxSampleN = 100_000

// planSet reads distinct or sample, the statement's one column, into out.
func planSet(e *influxql.Call, out *Output, s *influxql.SelectStatement) error {
	if len(s.Fields) != 1 {
		return badQuery("aggregate function %s() cannot be combined with other functions or fields", e.Name)
	}
	// InfluxDB's messages.
	switch {
	case e.Name == "distinct" && len(e.Args) != 1:
		return badQuery("distinct function can only have one argument")
	case e.Name == "sample" && len(e.Args) != 2:
		return badQuery("invalid number of arguments for sample, expected 2, got %d", len(e.Args))
	}
	ref, ok := e.Args[0].(*influxql.VarRef)
	if !ok {
		return badQuery("expected field argument in %s()", e.Name)
	}
	if e.Name == "sample" {
		n, ok := e.Args[1].(*influxql.IntegerLiteral)
		switch {
		case !ok:
			return badQuery("expected integer argument in sample()")
		case n.Val <= 1:
			return badQuery("sample window must be greater than 1, got %d", n.Val)
		case n.Val > MaxSampleN:
			return badQuery("sample()'s N must be at most %d, got %d", MaxSampleN, n.Val)
		}
		out.N = float64(n.Val)
	}
	out.Func, out.Field = e.Name, ref.Val
	return nil
}

// badQuery is a refusal with InfluxDB's message as is.
func badQuery(format string, a ...any) error {
	return models.Mark(fmt.Errorf(format, a...), ErrBadQuery)
}

// isSet says whether o is distinct or sample.
func (o *Output) isSet() bool { return o.Func == "distinct" || o.Func == "sample" }

// planRawSet turns p into a raw read when it is distinct or sample.
func (p *Plan) planRawSet() error {
	if len(p.Outputs) != 1 || !p.Outputs[0].isSet() {
		return nil
	}
	if p.Desc {
		return unsupported("ORDER BY time DESC with " + p.Outputs[0].Func + "()")
	}
	p.Req.Raw, p.Req.Stats = true, 0
	return nil
}

// rawSet lays out distinct's or sample's rows from a group's raw rows
// [time, value] in time order.
func (p *Plan) rawSet(values [][]any) [][]any {
	o := p.Outputs[0]
	start := p.Req.Start
	if start == math.MinInt64 {
		start = 0
	}
	bucket := func(v []any) int64 { return BucketOf(v[0].(int64), start, p.Req.Interval, p.Req.Offset) }
	var out [][]any
	for lo := 0; lo < len(values); {
		hi := lo + 1
		for hi < len(values) && bucket(values[hi]) == bucket(values[lo]) {
			hi++
		}
		if o.Func == "sample" {
			out = append(out, sample(values[lo:hi], int(o.N))...)
		} else {
			out = append(out, distinct(values[lo:hi], bucket(values[lo]))...)
		}
		lo = hi
	}
	return out
}

// distinct is the distinct values of rows, at t, in the order of their
// first row's time, then value.
func distinct(rows [][]any, t int64) [][]any {
	seen := map[any]bool{}
	var out [][]any
	for _, r := range rows {
		if r[1] == nil || seen[r[1]] {
			continue
		}
		seen[r[1]] = true
		out = append(out, []any{r[0], r[1]})
	}
	slices.SortStableFunc(out, func(a, b []any) int {
		if c := cmp.Compare(a[0].(int64), b[0].(int64)); c != 0 {
			return c
		}
		return compareValues(a[1], b[1])
	})
	for _, r := range out {
		r[0] = t
	}
	return out
}

// sample is n of rows chosen at random (reservoir sampling), in time order.
func sample(rows [][]any, n int) [][]any {
	if len(rows) <= n {
		return rows
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for i := n; i < len(rows); i++ {
		if j := rand.IntN(i + 1); j < n {
			idx[j] = i
		}
	}
	slices.Sort(idx)
	out := make([][]any, n)
	for i, k := range idx {
		out[i] = rows[k]
	}
	return out
}

// compareValues orders two values of one field's type.
func compareValues(a, b any) int {
	switch x := a.(type) {
	case float64:
		return compareAs(x, b)
	case int64:
		return compareAs(x, b)
	case uint64:
		return compareAs(x, b)
	case string:
		return compareAs(x, b)
	case bool:
		y, _ := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	}
	return 0
}

func compareAs[T cmp.Ordered](x T, b any) int {
	y, _ := b.(T)
	return cmp.Compare(x, y)
}
