package query

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
)

// Source is the read side of a shard replica that Evaluate needs: the
// storage engine's shards provide it, and the query knows no engine.
type Source interface {
	// Scan offers each candidate series of metric to keep, by its lineproto
	// series key, before reading any of its points; for each kept series
	// that has points in [start, end] it calls visit with them, sorted by
	// ts. Candidates hold every term of match (models.FieldTag selects the
	// field; every series of metric when match is empty), and keep checks
	// whatever else it needs. pts is only valid during visit; an error from
	// visit ends the scan and is returned.
	Scan(metric string, match map[string]string, start, end int64, keep func(key string) bool, visit func(key string, pts []models.SeriesPoint) error) error
}

// ErrCorrupt: the source offered a series key or a point it cannot hold.
var ErrCorrupt = errors.New("query: corrupt series from the shard")

// DefaultMaxPoints bounds the raw points, or the values kept for median and
// percentile, of one query when the request names no bound.
const DefaultMaxPoints = 5_000_000

// MaxShardBuckets bounds the (group, field, time bucket) cells one shard
// accumulates for count, sum and mean: the broker refuses a result of more
// values anyway.
const MaxShardBuckets = MaxResultValues

// maxShardBytes bounds the memory of a shard's cells: a cell that keeps
// min/max, first/last, stddev or values costs several times a count-and-sum
// one, so fewer of them fit (about 3.5M).
// A variable so tests can lower it.
var maxShardBytes = MaxShardBuckets * int64(unsafe.Sizeof(Partial{}))

// maxCells is how many cells a shard may accumulate for st.
func maxCells(st Stats) int {
	size := int64(unsafe.Sizeof(Partial{}))
	if NeedsExtra(st) {
		size += int64(unsafe.Sizeof(Extra{}))
	}
	return int(maxShardBytes / size)
}

// Evaluate runs req over one shard. The engine offers each candidate series
// by key; those failing the field or the tag condition are dropped before
// any block is read. The points of the others stream, one series at a time
// in a reused buffer, into either raw series or dense per-(group, field)
// bucket arrays, so aggregation costs no allocation per point or bucket.
func Evaluate(src Source, req *ShardRequest) (*ShardResult, error) {
	cond, err := ParseCond(req.Cond)
	if err != nil {
		return nil, err
	}
	if req.Interval < 0 {
		return nil, fmt.Errorf("%w: negative interval", ErrBadQuery)
	}
	ev := &evaluator{req: req, cond: cond, groups: map[string]*groupAcc{}, series: map[string]*seriesInfo{},
		maxPoints: req.MaxPoints, extra: NeedsExtra(req.Stats)}
	if ev.maxPoints <= 0 {
		ev.maxPoints = DefaultMaxPoints
	}
	if b, ok := src.(Bounder); ok && req.Bounds {
		return ev.bounds(b)
	}
	if len(CondFields(cond)) > 0 {
		// The rows the condition keeps, read first; the evaluator then
		// runs over just them.
		if src, err = filterRows(src, req, cond, ev.maxPoints); err != nil {
			return nil, err
		}
		ev.cond, cond = nil, nil
	}
	if req.Interval > 0 {
		ev.firstNum, ev.lastNum = ev.num(req.Start), ev.num(req.End)
	}
	if req.Rollup > 0 {
		if err := ev.evaluateRollup(src); err != nil {
			return nil, err
		}
		return ev.result(), nil
	}
	err = ev.eachField(func(match map[string]string) error {
		return src.Scan(req.Measurement, match, req.Start, req.End, ev.keep, ev.visit)
	})
	if err != nil {
		return nil, err
	}
	return ev.result(), nil
}

// eachField runs read once per field the request reads (once for every
// field with AllFields), with the match terms of the tag condition and the
// field; visit's or keep's own error comes back unwrapped.
func (ev *evaluator) eachField(read func(match map[string]string) error) error {
	match := map[string]string{}
	equalities(ev.cond, match)
	fields := ev.req.Fields
	if ev.req.AllFields {
		fields = []string{""}
	}
	for _, field := range fields {
		m := maps.Clone(match)
		if field != "" {
			m[models.FieldTag] = field
		}
		ev.field = field
		clear(ev.series)
		err := read(m)
		if ev.err != nil {
			return ev.err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type evaluator struct {
	req       *ShardRequest
	cond      influxql.Expr
	field     string // the field scanned; "" for every field
	series    map[string]*seriesInfo
	groups    map[string]*groupAcc
	raw       []RawSeries
	extra     bool
	maxPoints int
	kept      int // raw points or values kept, against maxPoints
	cells     int // bucket cells allocated, against maxCells
	// firstNum, lastNum: the bucket numbers of Start and End (Interval > 0).
	firstNum, lastNum int64
	err               error // why visit stopped the scan
}

// seriesInfo is what keep learnt of a series key, for visit.
type seriesInfo struct {
	tags  []Tag // every tag, sorted by key
	field string
	acc   *fieldAcc // nil for raw requests
}

type groupAcc struct {
	tags   []Tag
	fields map[string]*fieldAcc
}

// fieldAcc is one (group, field)'s buckets, dense: slot i is bucket number
// lo+i, where bucket number n starts at n*Interval+Offset (Interval 0: one
// bucket, number 0, starting at Start). It covers the bucket numbers the
// group's points have reached, so a group costs its time span, not its
// points.
type fieldAcc struct {
	typ    models.FieldType
	lo     int64
	parts  []Partial
	extras []Extra // backs parts[i].X when the request needs more than count and sum
}

// keep parses a candidate series key and says whether the series is read.
func (ev *evaluator) keep(key string) bool {
	if _, ok := ev.series[key]; ok {
		return true
	}
	_, ltags, field, err := lineproto.ParseSeriesKey(key)
	if err != nil {
		ev.err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		return false
	}
	if ev.field != "" && field != ev.field {
		return false
	}
	tags := make([]Tag, len(ltags))
	for i, t := range ltags {
		tags[i] = Tag{t.Key, t.Value}
	}
	if !MatchTags(ev.cond, func(k string) string { return tagValue(tags, k) }) {
		return false
	}
	ev.series[key] = &seriesInfo{tags: tags, field: field}
	return true
}

// tagValue is the value of tag k ("" when absent, as InfluxDB compares).
func tagValue(tags []Tag, k string) string {
	for _, t := range tags {
		if t.Key == k {
			return t.Value
		}
	}
	return ""
}

func (ev *evaluator) visit(key string, pts []models.SeriesPoint) error {
	if ev.err != nil {
		return ev.err
	}
	si := ev.series[key]
	if si == nil {
		return nil // keep said no (or failed: ev.err)
	}
	req := ev.req
	if req.Raw || req.Stats&StatValues != 0 {
		if ev.kept += len(pts); ev.kept > ev.maxPoints {
			ev.err = fmt.Errorf("%w: more than %d points in one shard; narrow the time range or the series", ErrTooLarge, ev.maxPoints)
			return ev.err
		}
	}
	if req.Raw {
		ev.raw = append(ev.raw, NewRawSeries(si.tags, si.field, pts))
		return nil
	}
	if si.acc == nil {
		si.acc = ev.groupOf(si).fieldAcc(si.field)
		if len(pts) > 0 {
			si.acc.typ = pts[0].Type // one per field in a shard
		}
	}
	if err := ev.add(si.acc, pts); err != nil {
		ev.err = err
		return err
	}
	return nil
}

func (ev *evaluator) groupOf(si *seriesInfo) *groupAcc {
	var tags []Tag
	if ev.req.GroupAll {
		tags = si.tags
	} else {
		tags = make([]Tag, len(ev.req.GroupBy))
		for i, k := range ev.req.GroupBy {
			tags[i] = Tag{k, tagValue(si.tags, k)}
		}
	}
	key := GroupKey(tags)
	g := ev.groups[key]
	if g == nil {
		g = &groupAcc{tags: tags, fields: map[string]*fieldAcc{}}
		ev.groups[key] = g
	}
	return g
}

func (g *groupAcc) fieldAcc(field string) *fieldAcc {
	fa := g.fields[field]
	if fa == nil {
		fa = &fieldAcc{}
		g.fields[field] = fa
	}
	return fa
}

// num is the bucket number of ts (Interval > 0).
func (ev *evaluator) num(ts int64) int64 {
	return floorDiv(ts-ev.req.Offset, ev.req.Interval)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// add folds one series' points (sorted by ts, all in [Start, End]) into fa.
func (ev *evaluator) add(fa *fieldAcc, pts []models.SeriesPoint) error {
	if len(pts) == 0 {
		return nil
	}
	req := ev.req
	if req.Interval <= 0 {
		if err := ev.cover(fa, 0, 0); err != nil {
			return err
		}
		ev.fold(fa.parts[:1], pts)
		return nil
	}
	if err := ev.cover(fa, ev.num(pts[0].TS), ev.num(pts[len(pts)-1].TS)); err != nil {
		return err
	}
	// Points come sorted: find each bucket's run by comparing with the next
	// bucket's start, one division per bucket rather than per point.
	for len(pts) > 0 {
		n := ev.num(pts[0].TS)
		next := (n+1)*req.Interval + req.Offset
		end := 1
		for end < len(pts) && pts[end].TS < next {
			end++
		}
		i := n - fa.lo
		if i < 0 || i >= int64(len(fa.parts)) { // a source breaking Scan's contract
			return fmt.Errorf("%w: a point at %d is outside [%d, %d]", ErrCorrupt, pts[0].TS, req.Start, req.End)
		}
		ev.fold(fa.parts[i:i+1], pts[:end])
		pts = pts[end:]
	}
	return nil
}

// fold adds pts into the one partial in slot.
func (ev *evaluator) fold(slot []Partial, pts []models.SeriesPoint) {
	p := &slot[0]
	if ev.extra && len(pts) > 0 && pts[0].Type == models.FieldString {
		for _, pt := range pts {
			p.AddString(pt.TS, pt.Str, ev.req.Stats)
		}
		return
	}
	if !ev.extra {
		sum := p.Sum
		for _, pt := range pts {
			sum += pt.Value
		}
		p.Count += int64(len(pts))
		p.Sum = sum
		return
	}
	for _, pt := range pts {
		p.Add(pt.TS, pt.Value, ev.req.Stats)
	}
}

// cover grows fa so it has slots for bucket numbers [a, b]: to their union
// with what it covers, plus room to grow the same way again, within the
// query's range.
func (ev *evaluator) cover(fa *fieldAcc, a, b int64) error {
	hi := fa.lo + int64(len(fa.parts)) - 1
	if len(fa.parts) > 0 && a >= fa.lo && b <= hi {
		return nil
	}
	lo := a
	if len(fa.parts) > 0 {
		lo, hi = min(lo, fa.lo), max(b, hi)
		// Grow by at least half again, so a group whose series each start a
		// little later costs few copies.
		slack := int64(len(fa.parts)) / 2
		if a < fa.lo {
			lo -= slack
		}
		if b > fa.lo+int64(len(fa.parts))-1 {
			hi += slack
		}
	} else {
		hi = b
	}
	if ev.req.Interval > 0 {
		lo, hi = max(lo, ev.firstNum), min(hi, ev.lastNum)
	}
	n := hi - lo + 1
	if ev.cells += int(n) - len(fa.parts); ev.cells > maxCells(ev.req.Stats) {
		return fmt.Errorf("%w: more than %d (series group, time bucket) cells in one shard; narrow the time range, use a larger GROUP BY time or fewer groups", ErrTooLarge, maxCells(ev.req.Stats))
	}
	at := int64(0) // where the old slots go
	if len(fa.parts) > 0 {
		at = fa.lo - lo
	}
	parts := make([]Partial, n)
	copy(parts[at:], fa.parts)
	if ev.extra {
		extras := make([]Extra, n)
		copy(extras[at:], fa.extras)
		for i := range parts {
			parts[i].X = &extras[i]
		}
		fa.extras = extras
	}
	fa.lo, fa.parts = lo, parts
	return nil
}

func (ev *evaluator) result() *ShardResult {
	r := &ShardResult{Raw: ev.raw}
	for _, key := range slices.Sorted(maps.Keys(ev.groups)) {
		g := ev.groups[key]
		out := Group{Tags: g.tags}
		for _, field := range slices.Sorted(maps.Keys(g.fields)) {
			out.Fields = append(out.Fields, ev.buckets(field, g.fields[field]))
		}
		r.Groups = append(r.Groups, out)
	}
	return r
}

// buckets is fa as the shard's answer: its slots, shared, not copied.
func (ev *evaluator) buckets(field string, fa *fieldAcc) FieldBuckets {
	if ev.req.Interval <= 0 {
		return FieldBuckets{Field: field, Type: fa.typ, First: ev.req.Start, Parts: fa.parts}
	}
	return FieldBuckets{Field: field, Type: fa.typ, First: fa.lo*ev.req.Interval + ev.req.Offset, Step: ev.req.Interval, Parts: fa.parts}
}

// BucketOf is the start of the time bucket holding ts; with interval 0 the
// only bucket starts at start.
func BucketOf(ts, start, interval, offset int64) int64 {
	if interval <= 0 {
		return start
	}
	return floorDiv(ts-offset, interval)*interval + offset
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
