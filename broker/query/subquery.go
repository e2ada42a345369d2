package query

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
)

// A subquery (SELECT max(m) FROM (SELECT mean(v) AS m FROM cpu GROUP BY
// time(1m))) runs its inner statement as any other; its result series,
// each column a field and each tag a tag, are the points the outer
// statement reads, evaluated on the broker by the same evaluator. One level
// of nesting; the inner result is bounded as any result is, and the points
// the outer statement reads by the raw-point bound.

// planSubquery plans FROM (SELECT ...) into p.Sub.
func (p *Plan) planSubquery(sub *influxql.SubQuery, now time.Time) error {
	for _, src := range sub.Statement.Sources {
		if _, ok := src.(*influxql.SubQuery); ok {
			return unsupported("subqueries nested more than one level")
		}
	}
	inner, err := PlanSelect(sub.Statement, now)
	if err != nil {
		return err
	}
	if inner.sources != nil {
		return unsupported("a subquery over several measurements")
	}
	p.Sub, p.DB = inner, inner.DB
	p.Req.Measurement = inner.Req.Measurement
	return nil
}

// MergeSubquery evaluates p over its subquery's result rows.
func (p *Plan) MergeSubquery(inner []Row) ([]Row, error) {
	src := &memSource{}
	total := 0
	for _, row := range inner {
		tags := make([]Tag, 0, len(row.Tags))
		for k, v := range row.Tags {
			tags = append(tags, Tag{k, v})
		}
		slices.SortFunc(tags, func(a, b Tag) int { return cmp.Compare(a.Key, b.Key) })
		ltags := make([]lineproto.Tag, len(tags))
		for i, t := range tags {
			ltags[i] = lineproto.Tag{Key: t.Key, Value: t.Value}
		}
		values := row.AnyValues()
		for c, field := range row.Columns[1:] {
			var pts []models.SeriesPoint
			for _, v := range values {
				switch x := v[c+1].(type) {
				case float64:
					pts = append(pts, models.SeriesPoint{TS: v[0].(int64), Value: x})
				case int64:
					pts = append(pts, models.SeriesPoint{TS: v[0].(int64), Value: float64(x)})
				}
			}
			if total += len(pts); total > DefaultMaxPoints {
				return nil, fmt.Errorf("%w: a subquery of more than %d values; narrow it", ErrTooLarge, DefaultMaxPoints)
			}
			if len(pts) > 0 {
				key := string(lineproto.AppendSeriesKey(nil, p.Req.Measurement, ltags, field))
				src.series = append(src.series, memSeries{key: key, tags: tags, field: field, pts: pts})
			}
		}
	}
	slices.SortFunc(src.series, func(a, b memSeries) int { return cmp.Compare(a.key, b.key) })
	r, err := Evaluate(src, &p.Req)
	if err != nil {
		return nil, err
	}
	return p.Merge([]*ShardResult{r})
}
