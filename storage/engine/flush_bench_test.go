package engine

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkFlushManySeries times the flush of a memtable holding perSeries
// points of each of a shard's series, after a few such flushes: a shard's
// share of a node growing to a million series over 8 shards, whose
// memtables reach DefaultFlushPoints at about 10 points a series (issue 21).
// Packs are allowed, as on a node whose replicas all speak them, and their
// compaction is timed with the flushes.
func BenchmarkFlushManySeries(b *testing.B) {
	for _, c := range []struct{ series, perSeries int }{{100_000, 10}, {100_000, 2}} {
		b.Run(fmt.Sprintf("series=%d/points=%d", c.series, c.perSeries), func(b *testing.B) {
			benchFlushMany(b, c.series, c.perSeries)
		})
	}
}

func benchFlushMany(b *testing.B, series, perSeries int) {
	_, s := openShard1(b, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0))
	s.(PackWriter).AllowPacks(true)
	tags := make([][]lineproto.Tag, series)
	for i := range tags {
		tags[i] = []lineproto.Tag{{Key: "host", Value: "h" + strconv.Itoa(i/10)}, {Key: "s", Value: strconv.Itoa(i)}}
	}
	ts := int64(0)
	fill := func() { applyRounds(b, s, tags, "usage", perSeries, &ts) }
	for range 3 { // the series exist and hold blocks
		fill()
		flushNow(b, s)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		fill()
		b.StartTimer()
		flushNow(b, s)
		// What the background compaction does after a flush: merge the
		// packs into blocks once they are packCompactCount.
		if _, err := s.(*boltShard).compactPacks(false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*series*perSeries), "ns/point")
}

// applyRounds applies rounds points to each series of tags (measurement
// cpu, field field), one round after another 10 s apart from *ts, in
// entries of 5,000 points.
func applyRounds(b *testing.B, s Shard, tags [][]lineproto.Tag, field string, rounds int, ts *int64) {
	const batch = 5000
	pts := make([]lineproto.Point, 0, batch)
	apply := func() {
		if err := s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: pts}); err != nil {
			b.Fatal(err)
		}
		pts = pts[:0]
	}
	for range rounds {
		*ts += 10e9
		for i := range tags {
			pts = append(pts, lineproto.Point{Metric: "cpu", Tags: tags[i], Field: field, TS: *ts, Value: float64(i%100) / 4})
			if len(pts) == batch {
				apply()
			}
		}
	}
	if len(pts) > 0 {
		apply()
	}
}

// BenchmarkFlushNewSeries times the flush of a memtable of 20k series with
// two points each, on a shard that holds 5k series already: series new to
// the shard (each iteration's are new; their first flush creates their
// index entries) against the same number of known series (issue 21: the
// +160k step's first flushes, of series new to their shard, ran several
// times as long as later ones of the same size). The series have the shape
// cairn bench write sends: a unique host tag and a region grouping 1,000.
func BenchmarkFlushNewSeries(b *testing.B) {
	for _, known := range []bool{false, true} {
		b.Run(fmt.Sprintf("known=%v", known), func(b *testing.B) {
			benchFlushNew(b, 20_000, 2, known)
		})
	}
}

func benchFlushNew(b *testing.B, series, perSeries int, known bool) {
	_, s := openShard1(b, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0))
	s.(PackWriter).AllowPacks(true)
	ts := int64(0)
	fill := func(first, n int) {
		tags := make([][]lineproto.Tag, n)
		for i := range tags {
			id := first + i
			tags[i] = []lineproto.Tag{{Key: "host", Value: "h" + strconv.Itoa(id)}, {Key: "region", Value: "r" + strconv.Itoa(id/1000)}}
		}
		applyRounds(b, s, tags, "value", perSeries, &ts)
	}
	// The shard's earlier series, spread over the id space the new ones
	// join (every 8th, as a shard of 8 holds), flushed.
	fill(0, 5_000)
	flushNow(b, s)
	next := 5_000
	if known {
		fill(next, series)
		flushNow(b, s)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if known {
			fill(5_000, series)
		} else {
			fill(next, series)
			next += series
		}
		b.StartTimer()
		flushNow(b, s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*series), "ns/series")
}
