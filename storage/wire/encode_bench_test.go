package wire

import (
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// encodeBenchPoints is one shard's part of a 5,000-point batch over 8
// shards (625 points) shaped like `cairn bench write`'s: each host names a
// series, and a series comes back every `distinct` points. 625: every point
// a new series, as in a step of new series (issue 21); 156: each series four
// times, as 32 senders of 40,000 series send them.
func encodeBenchPoints(distinct int) []lineproto.Point {
	pts := make([]lineproto.Point, 625)
	for i := range pts {
		h := i % distinct
		pts[i] = lineproto.Point{Metric: "bench", Field: "float", Value: 1.5, TS: int64(i / distinct),
			Tags: []lineproto.Tag{{Key: "host", Value: "h" + strconv.Itoa(40000+h*8)}, {Key: "region", Value: "r" + strconv.Itoa(40+h/125)}}}
	}
	return pts
}

// BenchmarkAppendPoints625 is the points part of a log entry as Prepare
// encodes it, string table included.
func BenchmarkAppendPoints625(b *testing.B) {
	for _, distinct := range []int{625, 156} {
		b.Run("series="+strconv.Itoa(distinct), func(b *testing.B) {
			pts := encodeBenchPoints(distinct)
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendPoints(buf[:0], pts, nil)
			}
			b.ReportMetric(float64(len(buf))/float64(len(pts)), "B/point")
		})
	}
}
