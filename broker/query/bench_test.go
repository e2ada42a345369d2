package query

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

// fakeSource serves fixed series, filtered by metric only (Evaluate applies
// the tag condition itself; the equality match is an optimisation).
type fakeSource []engine.Series

// Scan serves the series of metric holding the field of a FieldTag match
// (the other terms of match are left to keep, which Scan allows), in key
// order, with their points in [start, end].
func (f fakeSource) Scan(metric string, match map[string]string, start, end int64, keep func(string) bool, visit func(string, []engine.SeriesPoint) error) error {
	type ser struct {
		key string
		pts []engine.SeriesPoint
	}
	var all []ser
	for _, s := range f {
		if s.Metric != metric {
			continue
		}
		if fld, ok := match[engine.FieldTag]; ok && fld != fieldOf(s) {
			continue
		}
		var tags []lineproto.Tag
		for k, v := range s.Tags {
			if k != engine.FieldTag {
				tags = append(tags, lineproto.Tag{Key: k, Value: v})
			}
		}
		slices.SortFunc(tags, func(a, b lineproto.Tag) int { return strings.Compare(a.Key, b.Key) })
		// Points are sorted by time: the range is a sub-slice.
		lo := sort.Search(len(s.Points), func(i int) bool { return s.Points[i].TS >= start })
		hi := sort.Search(len(s.Points), func(i int) bool { return s.Points[i].TS > end })
		pts := s.Points[lo:max(lo, hi)]
		all = append(all, ser{string(lineproto.AppendSeriesKey(nil, metric, tags, fieldOf(s))), pts})
	}
	slices.SortFunc(all, func(a, b ser) int { return strings.Compare(a.key, b.key) })
	for _, s := range all {
		if len(s.pts) == 0 || !keep(s.key) {
			continue
		}
		if err := visit(s.key, s.pts); err != nil {
			return err
		}
	}
	return nil
}

func fieldOf(s engine.Series) string {
	if f := s.Tags[engine.FieldTag]; f != "" {
		return f
	}
	return engine.DefaultField
}

// BenchmarkGroupByHost: the shard and broker work of
// SELECT mean(v) FROM cpu WHERE time > now()-1d GROUP BY time(5m), host over
// 5,000 series of a day of 1-minute points, split over 8 shards, excluding
// the engine's reads and the network.
func BenchmarkGroupByHost(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	shards := make([]fakeSource, 8)
	for h := range 5000 {
		s := engine.Series{Metric: "cpu", Tags: map[string]string{"host": fmt.Sprintf("h%04d", h), engine.FieldTag: "v"}}
		for i := range 1440 {
			s.Points = append(s.Points, engine.SeriesPoint{TS: now.Add(-24*time.Hour + time.Duration(i+1)*time.Minute).UnixNano(), Value: float64(i % 100)})
		}
		shards[h%8] = append(shards[h%8], s)
	}
	stmt, err := influxql.ParseStatement("SELECT mean(v) FROM cpu WHERE time > now()-1d GROUP BY time(5m), host")
	require.NoError(b, err)
	plan, err := PlanSelect(stmt.(*influxql.SelectStatement), now)
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		var parts []*ShardResult
		for _, src := range shards {
			r, err := Evaluate(src, &plan.Req)
			require.NoError(b, err)
			back, err := UnmarshalResult(MarshalResult(r, plan.Req.Stats))
			require.NoError(b, err)
			parts = append(parts, back)
		}
		rows, err := plan.Merge(parts)
		require.NoError(b, err)
		require.Len(b, rows, 5000)
	}
}
