package query

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/influxdata/influxql"
)

// top(f[, tag...], N) and bottom(...) pick the N largest (smallest) points
// of each group, per GROUP BY time interval when there is one, and report
// them at their own times, in time order; with tag keys, only the best
// point of each combination of their values competes, and the tags are
// columns. They read the raw points (the raw-point bound applies) and pick
// on the broker. Ties go to the earlier point.

// topSpec is a top or bottom call.
type topSpec struct {
	bottom bool
	n      int
	tags   int // tag columns after the value
}

// planTop reads top or bottom into out and returns the tag columns it adds.
func planTop(e *influxql.Call, out *Output) ([]Output, error) {
	if len(e.Args) < 2 {
		return nil, fmt.Errorf("%w: %s() takes a field, optional tag keys and N", ErrBadQuery, e.Name)
	}
	ref, ok := e.Args[0].(*influxql.VarRef)
	if !ok {
		return nil, unsupported(fmt.Sprintf("%s(%s) (the first argument must be a field key)", e.Name, e.Args[0]))
	}
	n, ok := e.Args[len(e.Args)-1].(*influxql.IntegerLiteral)
	if !ok || n.Val <= 0 || n.Val > MaxTopN {
		return nil, fmt.Errorf("%w: the last argument of %s() must be an integer in [1, %d], got %s", ErrBadQuery, e.Name, MaxTopN, e.Args[len(e.Args)-1])
	}
	var tags []Output
	for _, a := range e.Args[1 : len(e.Args)-1] {
		t, ok := a.(*influxql.VarRef)
		if !ok {
			return nil, fmt.Errorf("%w: %s(): only tag keys between the field and N, got %s", ErrBadQuery, e.Name, a)
		}
		tags = append(tags, Output{Name: t.Val, Field: t.Val, Tag: true})
	}
	out.Field = ref.Val
	out.Top = &topSpec{bottom: e.Name == "bottom", n: int(n.Val), tags: len(tags)}
	return tags, nil
}

// MaxTopN bounds top's and bottom's N.
const MaxTopN = 100_000

// selectTop keeps the rows [time, value, tags...] of values, in time order
// (reversed with ORDER BY time DESC), that p's top or bottom picks.
func (p *Plan) selectTop(values [][]any) [][]any {
	spec := p.Outputs[0].Top
	bucket := func(v []any) int64 { return BucketOf(v[0].(int64), p.Req.Start, p.Req.Interval, p.Req.Offset) }
	var out [][]any
	for lo := 0; lo < len(values); {
		hi := lo + 1
		for hi < len(values) && bucket(values[hi]) == bucket(values[lo]) {
			hi++
		}
		out = append(out, spec.pick(values[lo:hi], p.Desc)...)
		lo = hi
	}
	return out
}

// pick is the spec's choice among one interval's rows.
func (s *topSpec) pick(rows [][]any, desc bool) [][]any {
	better := func(a, b []any) int {
		va, vb := a[1].(float64), b[1].(float64)
		if va != vb {
			if s.bottom {
				return cmp.Compare(va, vb)
			}
			return cmp.Compare(vb, va)
		}
		return cmp.Compare(a[0].(int64), b[0].(int64))
	}
	var cands [][]any
	best := map[string]int{} // tag values -> index in cands
	for _, r := range rows {
		if _, ok := r[1].(float64); !ok {
			continue
		}
		if s.tags == 0 {
			cands = append(cands, r)
			continue
		}
		key := fmt.Sprint(r[2:])
		if i, ok := best[key]; !ok {
			best[key] = len(cands)
			cands = append(cands, r)
		} else if better(r, cands[i]) < 0 {
			cands[i] = r
		}
	}
	slices.SortStableFunc(cands, better)
	cands = cands[:min(len(cands), s.n)]
	slices.SortStableFunc(cands, func(a, b []any) int {
		if desc {
			return cmp.Compare(b[0].(int64), a[0].(int64))
		}
		return cmp.Compare(a[0].(int64), b[0].(int64))
	})
	return cands
}
