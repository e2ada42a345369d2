package query

import (
	"maps"
	"math"
	"slices"
)

// A raw SELECT asked for in chunks (chunked=true) is answered page by page
// rather than whole: the broker asks the shards for the time span of the
// matching points (Bounds, read from block headers), then for the points of
// one time window after another, each shard bounded to a page of points,
// and writes a page out before it reads the next. Its memory is a page's,
// not the answer's; each block is decoded once, or twice where a window's
// edge cuts it. The windows adapt to the points' density (Pager).

// Bounder is a Source that knows the time span of its series without
// reading their points (the engine's block headers).
type Bounder interface {
	Bounds(metric string, match map[string]string, keep func(key string) bool) (lo, hi int64, ok bool, err error)
}

// bounds answers a Bounds request: the span of the series keep accepts,
// per requested field as Scan would offer them. A condition on fields
// widens it to the series the tag condition keeps.
func (ev *evaluator) bounds(b Bounder) (*ShardResult, error) {
	if len(CondFields(ev.cond)) > 0 {
		ev.cond = nil
	}
	lo, hi, found := int64(math.MaxInt64), int64(math.MinInt64), false
	err := ev.eachField(func(match map[string]string) error {
		l, h, ok, err := b.Bounds(ev.req.Measurement, match, ev.keep)
		if ok {
			lo, hi, found = min(lo, l), max(hi, h), true
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return &ShardResult{}, nil
	}
	span := Partial{Count: 1, X: &Extra{FirstTS: lo, LastTS: hi}}
	return &ShardResult{Groups: []Group{{Fields: []FieldBuckets{{First: ev.req.Start, Parts: []Partial{span}}}}}}, nil
}

// Streamable says whether p can be answered page by page: a raw select of
// one measurement without GROUP BY, SLIMIT, SOFFSET or anything computed
// over its rows (those need the whole answer, bounded by
// --query-max-points). LIMIT and OFFSET cut the stream (Cut).
func (p *Plan) Streamable() bool {
	if !p.Req.Raw || p.Sub != nil || p.Local != nil || p.sources != nil || p.Grouped || p.extra > 0 ||
		p.SLimit > 0 || p.SOffset > 0 {
		return false
	}
	for _, o := range p.Outputs {
		if o.Func != "" || o.Transform != nil || o.Top != nil || o.Math != nil {
			return false
		}
	}
	return true
}

// Stream is a streamed raw select: its columns, fixed before the first
// page from the series of its measurement.
type Stream struct {
	p       *Plan // without LIMIT and OFFSET: a page is not cut
	outputs []Output
	Name    string
	Columns []string
	// limit and offset of the statement; skipped and kept count the rows
	// Cut passed over.
	limit, offset, skipped, kept int
}

// NewStream lays out the columns of p's answer (p.Streamable()) from the
// series of its measurement: with * every field and tag key, in name order;
// otherwise the columns named, a name that is no field being a tag.
func (p *Plan) NewStream(series []SeriesInfo) *Stream {
	fields, tags := map[string]bool{}, map[string]bool{}
	for _, s := range series {
		if s.Measurement != p.Req.Measurement {
			continue
		}
		fields[s.Field] = true
		for _, t := range s.Tags {
			tags[t.Key] = true
		}
	}
	var outputs []Output
	if p.Wildcard {
		names := maps.Clone(fields)
		maps.Copy(names, tags)
		for _, n := range slices.Sorted(maps.Keys(names)) {
			outputs = append(outputs, Output{Name: n, Field: n, Tag: !fields[n]})
		}
	} else {
		outputs = slices.Clone(p.Outputs)
		for i := range outputs {
			outputs[i].Tag = outputs[i].Tag || !fields[outputs[i].Field]
		}
	}
	whole := *p
	whole.Limit, whole.Offset = 0, 0
	st := &Stream{p: &whole, outputs: outputs, Name: p.Req.Measurement, Columns: []string{"time"},
		limit: p.Limit, offset: p.Offset}
	for _, o := range outputs {
		st.Columns = append(st.Columns, o.Name)
	}
	return st
}

// BoundsRequest asks the shards for the time span of the stream's points.
func (st *Stream) BoundsRequest() ShardRequest {
	r := st.p.Req
	r.Raw, r.Stats, r.Bounds, r.MaxPoints = false, StatFirst|StatLast, true, 0
	return r
}

// Span reads the shards' answers to BoundsRequest: the span of the points
// within the statement's range; ok false when there is none.
func (st *Stream) Span(results []*ShardResult) (lo, hi int64, ok bool) {
	lo, hi = math.MaxInt64, math.MinInt64
	for _, r := range results {
		for _, g := range r.Groups {
			for _, f := range g.Fields {
				for _, part := range f.Parts {
					if part.Count > 0 && part.X != nil {
						lo, hi, ok = min(lo, part.X.FirstTS), max(hi, part.X.LastTS), true
					}
				}
			}
		}
	}
	return max(lo, st.p.Req.Start), min(hi, st.p.Req.End), ok && max(lo, st.p.Req.Start) <= min(hi, st.p.Req.End)
}

// PageRequest asks for the points in [start, end], at most maxPoints from
// each shard.
func (st *Stream) PageRequest(start, end int64, maxPoints int) ShardRequest {
	r := st.p.Req
	r.Start, r.End, r.MaxPoints = start, end, maxPoints
	return r
}

// Page lays the shards' answers to one PageRequest out as rows, [time,
// one value per column], in the statement's order; n is the points read.
func (st *Stream) Page(results []*ShardResult) (values [][]any, n int, err error) {
	for _, r := range results {
		for _, s := range r.Raw {
			n += len(s.TS)
		}
	}
	rows, err := st.p.mergeRawAs(results, st.outputs)
	if err != nil || len(rows) == 0 {
		return nil, n, err
	}
	return rows[0].Values, n, nil
}

// Cut applies the statement's OFFSET and LIMIT to the next page's rows;
// done once LIMIT rows were kept (no page need be read after).
func (st *Stream) Cut(values [][]any) (kept [][]any, done bool) {
	if skip := min(st.offset-st.skipped, len(values)); skip > 0 {
		st.skipped += skip
		values = values[skip:]
	}
	if st.limit > 0 {
		values = values[:min(len(values), st.limit-st.kept)]
	}
	st.kept += len(values)
	return values, st.limit > 0 && st.kept >= st.limit
}
