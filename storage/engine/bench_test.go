package engine

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkApply5000 applies 5,000-point batches, each one durable bbolt commit
// with fsync, like one write request's shard batch. The cost is driven by how
// many series a batch touches: every series' newest B+tree page is rewritten
// on each commit, so the sub-benchmarks vary series x timestamps per batch.
func BenchmarkApply5000(b *testing.B) {
	for _, numSeries := range []int{50, 500, 5000} {
		b.Run(fmt.Sprintf("series=%d", numSeries), func(b *testing.B) { benchApply(b, numSeries) })
	}
}

func benchApply(b *testing.B, numSeries int) {
	_, s := openShard1(b)
	tags := make([][]lineproto.Tag, numSeries)
	for i := range tags {
		tags[i] = []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("server%04d", i)}, {Key: "region", Value: "eu"}}
	}
	perSeries := 5000 / numSeries
	batch := func(n int) []lineproto.Point {
		points := make([]lineproto.Point, 0, 5000)
		for ts := range perSeries {
			for i := range tags {
				points = append(points, lineproto.Point{Metric: "cpu", Tags: tags[i], Field: "usage",
					TS: int64(n*perSeries+ts) * 1e9, Value: float64(i)})
			}
		}
		return points
	}
	// Warm up so the series exist and the numbers show the steady state.
	for n := range 3 {
		if err := s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: batch(n)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	n := 3
	for b.Loop() {
		b.StopTimer()
		points := batch(n)
		b.StartTimer()
		if err := s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: points}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((n-3)*5000)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkQuery1M reads one series of 1M points over its full range, 800k
// of them flushed (the flush threshold is set, so engines with other defaults
// compare on the same state) and 200k in the memtable.
func BenchmarkQuery1M(b *testing.B) {
	_, s := openShard1(b, WithFlushPoints(200_000))
	const total, perBatch = 1_000_000, 200_000
	for start := 0; start < total; start += perBatch {
		points := make([]lineproto.Point, perBatch)
		for i := range points {
			points[i] = lineproto.Point{Metric: "cpu", Field: "value", TS: int64(start + i), Value: float64(i)}
		}
		if err := s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: points}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.Query("cpu", nil, 0, total)
		if err != nil || len(got) != 1 || len(got[0].Points) != total {
			b.Fatalf("query: %v, %d series", err, len(got))
		}
	}
	b.ReportMetric(float64(b.N*total)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkEntryEncode5000 encodes a loadgen-shaped batch: 5,000 points of
// one metric and field, 1,000 hosts x 5 regions.
func BenchmarkEntryEncode5000(b *testing.B) {
	e := Entry{TxnID: 1, Term: 1}
	for i := range 5000 {
		e.Points = append(e.Points, lineproto.Point{Metric: "cpu", Field: "usage", TS: int64(i), Value: 1.5,
			Tags: []lineproto.Tag{{Key: "host", Value: "s0h" + strconv.Itoa(i/5)}, {Key: "region", Value: "r" + strconv.Itoa(i%5)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = e.appendBinary(make([]byte, 0, 64+len(e.Points)*16))
	}
}

// BenchmarkMemtableInsertKnownSeries inserts one point of each of a
// shard's flushed series into a fresh memtable, in batches of 625 points
// (a 5,000-point write split over 8 shards), series in the same order
// each pass: the state of a node with many series, whose memtables hold a
// point or two per series, so that nearly every point is of a series new
// to its memtable (issue 21). 125,000 series is a shard's share of a
// million over 8 shards; 5,000 of 40,000.
func BenchmarkMemtableInsertKnownSeries(b *testing.B) {
	for _, n := range []int{5000, 125000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) { benchMemtableInsert(b, n) })
	}
}

func benchMemtableInsert(b *testing.B, n int) {
	ix := newSeriesIndex()
	const batch = 625
	var entries [][]lineproto.Point
	var keys []*pointKeys
	newest := make([]seriesMax, 0, n)
	for i := 0; i < n; i += batch {
		pts := make([]lineproto.Point, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			p := lineproto.Point{Metric: "m", Tags: []lineproto.Tag{{Key: "g", Value: strconv.Itoa(j / 1000)}, {Key: "s", Value: strconv.Itoa(j)}}, Field: "v"}
			pts = append(pts, p)
			ix.put(string(lineproto.AppendSeriesKey(nil, p.Metric, p.Tags, p.Field)), uint64(j+1))
			newest = append(newest, seriesMax{uint64(j + 1), 0})
		}
		k := new(pointKeys)
		k.build(pts)
		entries, keys = append(entries, pts), append(keys, k)
	}
	ix.setNewest(newest)
	ix.lastSeries.Store(int64(n)) // as after a flush of such a memtable
	ix.lastPerSeries.Store(1)
	b.ReportAllocs()
	ts, txn := int64(0), uint64(0)
	for b.Loop() {
		ts++
		mt := newMemtable(ix)
		for i, pts := range entries {
			for j := range pts {
				pts[j].TS = ts
			}
			txn++
			mt.insert(Entry{TxnID: txn, Term: 1, Points: pts}, keys[i], time.Time{})
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*int64(n)), "ns/point")
}

// BenchmarkMemtableInsertNewSeries inserts 20,000 series new to the shard
// (a shard's share of 160,000 over 8) in 625-point entries into a memtable
// made after flushes whose series held hint points each: 64 is a shard of
// 5,000 series written for a while, 1 one of many series (issue 21).
func BenchmarkMemtableInsertNewSeries(b *testing.B) {
	for _, hint := range []int64{1, 64} {
		b.Run(fmt.Sprintf("hint=%d", hint), func(b *testing.B) { benchMemtableInsertNew(b, hint) })
	}
}

func benchMemtableInsertNew(b *testing.B, hint int64) {
	const n, batch = 20000, 625
	var entries [][]lineproto.Point
	var keys []*pointKeys
	for i := 0; i < n; i += batch {
		pts := make([]lineproto.Point, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			pts = append(pts, lineproto.Point{Metric: "m", Tags: []lineproto.Tag{{Key: "g", Value: strconv.Itoa(j / 1000)}, {Key: "s", Value: strconv.Itoa(j)}}, Field: "v"})
		}
		k := new(pointKeys)
		k.build(pts)
		entries, keys = append(entries, pts), append(keys, k)
	}
	b.ReportAllocs()
	txn := uint64(0)
	for b.Loop() {
		ix := newSeriesIndex()
		ix.lastSeries.Store(5000)
		ix.lastPerSeries.Store(hint)
		mt := newMemtable(ix)
		for i, pts := range entries {
			txn++
			mt.insert(Entry{TxnID: txn, Term: 1, Points: pts}, keys[i], time.Time{})
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*int64(n)), "ns/point")
}
