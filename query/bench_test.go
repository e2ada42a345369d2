package query

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

// fakeSource serves fixed series, filtered by metric only (Evaluate applies
// the tag condition itself; the equality match is an optimisation).
type fakeSource []engine.Series

func (f fakeSource) Query(metric string, match map[string]string, start, end int64) ([]engine.Series, error) {
	var out []engine.Series
	for _, s := range f {
		if s.Metric != metric {
			continue
		}
		if fld, ok := match[engine.FieldTag]; ok && fld != fieldOf(s) {
			continue
		}
		cp := s
		cp.Points = nil
		for _, p := range s.Points {
			if p.TS >= start && p.TS <= end {
				cp.Points = append(cp.Points, p)
			}
		}
		if len(cp.Points) > 0 {
			out = append(out, cp)
		}
	}
	return out, nil
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
