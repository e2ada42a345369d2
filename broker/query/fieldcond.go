package query

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
)

// A condition on field values (WHERE value > 500) is decided per row, a
// (series, time) with the values of every field at that time. A shard
// holds each field of a series apart, and the fields of one tag set may
// sit on different shards (the series key that places a point names its
// field). So a statement whose condition and columns read one field only
// is filtered on the shards; any other runs in two steps: the shards send
// the raw points of every field it reads (of the series the condition's
// tag terms can match), and the broker joins them into rows, keeps those
// the condition holds for and evaluates the statement over them itself
// (Plan.Local), with the same evaluator. The points are bounded as a raw
// select's are.

// planFieldCond makes p filter on the broker when cond reads another field
// than the one the statement reads, or the statement reads every field.
func (p *Plan) planFieldCond(cond influxql.Expr) {
	fields := setOf(append(slices.Clone(p.Req.Fields), CondFields(cond)...))
	if !p.Req.AllFields && len(fields) == 1 {
		return // one field: each shard filters its own series
	}
	local := p.Req
	p.Local = &local
	p.Req.Raw, p.Req.Stats = true, 0
	p.Req.Fields = slices.Sorted(maps.Keys(fields))
	p.Req.Cond = ""
	if tags := tagTerms(cond); tags != nil {
		p.Req.Cond = tags.String()
	}
}

// tagTerms is cond with every field comparison made true: a tag condition
// every row cond holds for satisfies (InfluxQL has no NOT); nil when it
// says nothing.
func tagTerms(cond influxql.Expr) influxql.Expr {
	switch e := cond.(type) {
	case *influxql.ParenExpr:
		return tagTerms(e.Expr)
	case *influxql.BinaryExpr:
		if isLogical(e.Op) {
			l, r := tagTerms(e.LHS), tagTerms(e.RHS)
			switch {
			case e.Op == influxql.OR && (l == nil || r == nil):
				return nil
			case l == nil:
				return r
			case r == nil:
				return l
			}
			return &influxql.BinaryExpr{Op: e.Op, LHS: &influxql.ParenExpr{Expr: l}, RHS: &influxql.ParenExpr{Expr: r}}
		}
		if len(fieldRefs(e)) > 0 {
			return nil
		}
	}
	return cond
}

// mergeLocal evaluates p.Local over the shards' raw points.
func (p *Plan) mergeLocal(results []*ShardResult) ([]Row, error) {
	src := &memSource{}
	total := 0
	for _, r := range results {
		for _, rs := range r.Raw {
			if total += len(rs.TS); total > DefaultMaxPoints {
				return nil, fmt.Errorf("%w: more than %d points read for a field condition; narrow the time range or the series", ErrTooLarge, DefaultMaxPoints)
			}
			ltags := make([]lineproto.Tag, len(rs.Tags))
			for i, t := range rs.Tags {
				ltags[i] = lineproto.Tag{Key: t.Key, Value: t.Value}
			}
			pts := make([]models.SeriesPoint, len(rs.TS))
			for i := range rs.TS {
				pts[i] = rs.Point(i)
			}
			key := string(lineproto.AppendSeriesKey(nil, p.Local.Measurement, ltags, rs.Field))
			src.series = append(src.series, memSeries{key: key, tags: rs.Tags, field: rs.Field, pts: pts})
		}
	}
	slices.SortFunc(src.series, func(a, b memSeries) int { return cmp.Compare(a.key, b.key) })
	r, err := Evaluate(src, p.Local)
	if err != nil {
		return nil, err
	}
	q := *p
	q.Req, q.Local = *p.Local, nil
	return q.Merge([]*ShardResult{r})
}

// filterRows reads the rows of req's series that satisfy cond (which reads
// fields) into memory: on a shard when the statement reads one field, on
// the broker (mergeLocal's source) otherwise.
func filterRows(src Source, req *ShardRequest, cond influxql.Expr, maxPoints int) (*memSource, error) {
	match := map[string]string{}
	equalities(cond, match)
	var scans []string // fields to scan; "" reads every field
	if req.AllFields {
		scans = []string{""}
	} else {
		scans = slices.Sorted(maps.Keys(setOf(append(slices.Clone(req.Fields), CondFields(cond)...))))
	}
	rows := map[string]*rowSeries{} // by tag set
	kept := 0
	var failed error
	for _, field := range scans {
		m := maps.Clone(match)
		if field != "" {
			m[models.FieldTag] = field
		}
		keys := map[string]*rowSeries{}
		keep := func(key string) bool {
			_, ltags, f, err := lineproto.ParseSeriesKey(key)
			if err != nil {
				failed = fmt.Errorf("%w: %w", ErrCorrupt, err)
				return false
			}
			if field != "" && f != field {
				return false
			}
			tags := make([]Tag, len(ltags))
			for i, t := range ltags {
				tags[i] = Tag{t.Key, t.Value}
			}
			tk := GroupKey(tags)
			rs := rows[tk]
			if rs == nil {
				rs = &rowSeries{tags: tags, fields: map[string]*fieldPoints{}}
				rows[tk] = rs
			}
			if rs.fields[f] == nil {
				rs.fields[f] = &fieldPoints{key: key}
			}
			keys[key] = rs
			return true
		}
		visit := func(key string, pts []models.SeriesPoint) error {
			rs := keys[key]
			if rs == nil {
				return nil
			}
			if kept += len(pts); kept > maxPoints {
				failed = fmt.Errorf("%w: more than %d points read for a field condition in one shard; narrow the time range or the series", ErrTooLarge, maxPoints)
				return failed
			}
			_, _, f, _ := lineproto.ParseSeriesKey(key)
			fp := rs.fields[f]
			fp.pts = append(fp.pts, pts...)
			return nil
		}
		err := src.Scan(req.Measurement, m, req.Start, req.End, keep, visit)
		if failed != nil {
			return nil, failed
		}
		if err != nil {
			return nil, err
		}
	}
	out := &memSource{}
	for _, tk := range slices.Sorted(maps.Keys(rows)) {
		rows[tk].filter(cond, out)
	}
	return out, nil
}

func setOf(names []string) map[string]bool {
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// rowSeries is one tag set's points, per field.
type rowSeries struct {
	tags   []Tag
	fields map[string]*fieldPoints
}

type fieldPoints struct {
	key string // the stored series key
	pts []models.SeriesPoint
	at  int // the join's position
}

// filter walks the series' rows in time order and adds the points of the
// rows cond holds for to out.
func (rs *rowSeries) filter(cond influxql.Expr, out *memSource) {
	names := slices.Sorted(maps.Keys(rs.fields))
	kept := make(map[string][]models.SeriesPoint, len(names))
	tag := func(k string) string { return tagValue(rs.tags, k) }
	var ts int64
	field := func(k string) (float64, bool) {
		fp := rs.fields[k]
		if fp == nil || fp.at >= len(fp.pts) || fp.pts[fp.at].TS != ts {
			return 0, false
		}
		return fp.pts[fp.at].Value, true
	}
	for {
		found := false
		for _, n := range names { // the next row's time: the least unread one
			fp := rs.fields[n]
			if fp.at < len(fp.pts) && (!found || fp.pts[fp.at].TS < ts) {
				ts, found = fp.pts[fp.at].TS, true
			}
		}
		if !found {
			break
		}
		ok := matchRow(cond, tag, field)
		for _, n := range names {
			fp := rs.fields[n]
			if fp.at < len(fp.pts) && fp.pts[fp.at].TS == ts {
				if ok {
					kept[n] = append(kept[n], fp.pts[fp.at])
				}
				fp.at++
			}
		}
	}
	for _, n := range names {
		if len(kept[n]) > 0 {
			out.series = append(out.series, memSeries{key: rs.fields[n].key, tags: rs.tags, field: n, pts: kept[n]})
		}
	}
}

// memSource is a Source over points held in memory.
type memSource struct{ series []memSeries }

type memSeries struct {
	key   string
	tags  []Tag
	field string
	pts   []models.SeriesPoint
}

// Scan offers the series holding every term of match, with their points in
// [start, end].
func (m *memSource) Scan(_ string, match map[string]string, start, end int64, keep func(string) bool, visit func(string, []models.SeriesPoint) error) error {
	for _, s := range m.series {
		if !matches(s, match) || !keep(s.key) {
			continue
		}
		lo, _ := slices.BinarySearchFunc(s.pts, start, func(p models.SeriesPoint, t int64) int { return cmp.Compare(p.TS, t) })
		hi, _ := slices.BinarySearchFunc(s.pts, end+1, func(p models.SeriesPoint, t int64) int { return cmp.Compare(p.TS, t) })
		if end == math.MaxInt64 {
			hi = len(s.pts)
		}
		if lo < hi {
			if err := visit(s.key, s.pts[lo:hi]); err != nil {
				return err
			}
		}
	}
	return nil
}

func matches(s memSeries, match map[string]string) bool {
	for k, v := range match {
		if k == models.FieldTag {
			if s.field != v {
				return false
			}
		} else if tagValue(s.tags, k) != v {
			return false
		}
	}
	return true
}
