package query

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairn-db/cairn/storage/engine"
)

// Source is the read side of a shard replica that Evaluate needs;
// engine.Shard provides it.
type Source interface {
	Query(metric string, match map[string]string, start, end int64) ([]engine.Series, error)
}

// DefaultMaxPoints bounds the raw points, or the values kept for median and
// percentile, of one query when the request names no bound.
const DefaultMaxPoints = 5_000_000

// Evaluate runs req over one shard: it reads the matching series of each
// asked field, drops those failing the tag condition, and returns either
// their points (Raw) or one Partial per (group, field, bucket).
func Evaluate(src Source, req *ShardRequest) (*ShardResult, error) {
	cond, err := ParseTagCond(req.Cond)
	if err != nil {
		return nil, err
	}
	if req.Interval < 0 {
		return nil, fmt.Errorf("%w: negative interval", ErrBadQuery)
	}
	maxPoints := req.MaxPoints
	if maxPoints <= 0 {
		maxPoints = DefaultMaxPoints
	}
	match := map[string]string{}
	equalities(cond, match)
	var fields []string
	if req.AllFields {
		fields = []string{""}
	} else {
		fields = req.Fields
	}
	ev := evaluator{req: req, groups: map[string]*groupAcc{}}
	kept := 0
	for _, field := range fields {
		m := maps.Clone(match)
		if field != "" {
			m[engine.FieldTag] = field
		}
		series, err := src.Query(req.Measurement, m, req.Start, req.End)
		if err != nil {
			return nil, err
		}
		for _, s := range series {
			f := s.Tags[engine.FieldTag]
			if f == "" {
				f = engine.DefaultField
			}
			if !MatchTags(cond, func(k string) string {
				if k == engine.FieldTag {
					return ""
				}
				return s.Tags[k]
			}) {
				continue
			}
			if req.Raw || req.Stats&StatValues != 0 {
				if kept += len(s.Points); kept > maxPoints {
					return nil, fmt.Errorf("%w: more than %d points in one shard; narrow the time range or the series", ErrTooLarge, maxPoints)
				}
			}
			ev.add(s, f)
		}
	}
	return ev.result(), nil
}

type evaluator struct {
	req    *ShardRequest
	groups map[string]*groupAcc
	raw    []RawSeries
}

type groupAcc struct {
	tags   []Tag
	fields map[string][]Bucket // sorted by Start
}

func seriesTags(s engine.Series) []Tag {
	tags := make([]Tag, 0, len(s.Tags))
	for k, v := range s.Tags {
		if k != engine.FieldTag {
			tags = append(tags, Tag{k, v})
		}
	}
	slices.SortFunc(tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	return tags
}

func (ev *evaluator) add(s engine.Series, field string) {
	req := ev.req
	if req.Raw {
		rs := RawSeries{Tags: seriesTags(s), Field: field, TS: make([]int64, len(s.Points)), Values: make([]float64, len(s.Points))}
		for i, p := range s.Points {
			rs.TS[i], rs.Values[i] = p.TS, p.Value
		}
		ev.raw = append(ev.raw, rs)
		return
	}
	var tags []Tag
	switch {
	case req.GroupAll:
		tags = seriesTags(s)
	default:
		tags = make([]Tag, len(req.GroupBy))
		for i, k := range req.GroupBy {
			tags[i] = Tag{k, s.Tags[k]}
		}
	}
	key := GroupKey(tags)
	g := ev.groups[key]
	if g == nil {
		g = &groupAcc{tags: tags, fields: map[string][]Bucket{}}
		ev.groups[key] = g
	}
	// The series' points come sorted by time, so its buckets are built in
	// order and merged into the group's in one linear pass: no map, no sort.
	estimate := len(s.Points)
	if n := len(s.Points); n > 0 && req.Interval > 0 {
		if span := (s.Points[n-1].TS-s.Points[0].TS)/req.Interval + 2; span > 0 && span < int64(estimate) {
			estimate = int(span)
		}
	} else if req.Interval <= 0 {
		estimate = 1
	}
	buckets := make([]Bucket, 0, estimate)
	sorted := true
	for _, p := range s.Points {
		start := BucketOf(p.TS, req.Start, req.Interval, req.Offset)
		if n := len(buckets); n == 0 || buckets[n-1].Start != start {
			sorted = sorted && (n == 0 || buckets[n-1].Start < start)
			buckets = append(buckets, Bucket{Start: start})
		}
		buckets[len(buckets)-1].Add(p.TS, p.Value, req.Stats)
	}
	if !sorted {
		buckets = coalesce(buckets)
	}
	g.fields[field] = MergeBuckets(g.fields[field], buckets)
}

// coalesce sorts buckets by start and merges those with the same start.
func coalesce(buckets []Bucket) []Bucket {
	slices.SortStableFunc(buckets, func(a, b Bucket) int { return cmp.Compare(a.Start, b.Start) })
	out := buckets[:0]
	for _, b := range buckets {
		if n := len(out); n > 0 && out[n-1].Start == b.Start {
			out[n-1].Merge(&b.Partial)
			continue
		}
		out = append(out, b)
	}
	return out
}

// MergeBuckets merges two bucket lists sorted by start into one; it may
// reuse either list's storage.
func MergeBuckets(a, b []Bucket) []Bucket {
	switch {
	case len(a) == 0:
		return b
	case len(b) == 0:
		return a
	}
	out := make([]Bucket, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].Start < b[j].Start:
			out = append(out, a[i])
			i++
		case a[i].Start > b[j].Start:
			out = append(out, b[j])
			j++
		default:
			m := a[i]
			m.Merge(&b[j].Partial)
			out = append(out, m)
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// BucketOf is the start of the time bucket holding ts; with interval 0 the
// only bucket starts at start.
func BucketOf(ts, start, interval, offset int64) int64 {
	if interval <= 0 {
		return start
	}
	d := ts - offset
	q := d / interval
	if d%interval < 0 {
		q--
	}
	return q*interval + offset
}

// GroupKey is the canonical text of a sorted tag list.
func GroupKey(tags []Tag) string {
	var b strings.Builder
	for _, t := range tags {
		b.WriteString(t.Key)
		b.WriteByte(0)
		b.WriteString(t.Value)
		b.WriteByte(0)
	}
	return b.String()
}

func (ev *evaluator) result() *ShardResult {
	r := &ShardResult{Raw: ev.raw}
	for _, key := range slices.Sorted(maps.Keys(ev.groups)) {
		g := ev.groups[key]
		out := Group{Tags: g.tags}
		for _, field := range slices.Sorted(maps.Keys(g.fields)) {
			out.Fields = append(out.Fields, FieldBuckets{Field: field, Buckets: g.fields[field]})
		}
		r.Groups = append(r.Groups, out)
	}
	return r
}
