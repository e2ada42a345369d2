package lineproto

import (
	"strconv"
	"testing"
)

// BenchmarkSeriesKey200k builds the series key and finds the shard of one
// point of each of 200,000 series shaped like `cairn bench write`'s
// (bench,host=h<i>,region=r<i/1000>, field float): what a write does for
// every point, its shard in the broker's split and its key in the engine's
// Prepare. The strings of that many series are not in the caches, as in a
// step of new series (issue 21).
func BenchmarkSeriesKey200k(b *testing.B) {
	pts := make([]Point, 200_000)
	for i := range pts {
		pts[i] = Point{Metric: "bench", Field: "float", Value: 1.5, TS: int64(i),
			Tags: []Tag{{Key: "host", Value: "h" + strconv.Itoa(i)}, {Key: "region", Value: "r" + strconv.Itoa(i/1000)}}}
	}
	var buf []byte
	shards := 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range pts {
			p := &pts[i]
			buf = AppendSeriesKey(buf[:0], p.Metric, p.Tags, p.Field)
			shards += ShardOfSeries(p.Metric, p.Tags, p.Field, 8)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pts)), "ns/point")
}
