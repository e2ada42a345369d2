package engine

import (
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkDisk40kSeries writes 10M points of 40k series at 10 s intervals
// (250 per series) in 5,000-point batches through the Engine interface, the
// way a standalone node receives them, and reports bytes on disk per point
// before and after compaction, write throughput, and heap in use.
//
// The series are 10,000 hosts x 4 metrics, tagged host, region (8) and dc
// (2), with values shaped like host monitoring: "up" (0/1, rarely changes),
// "conns" (an integer gauge, a third of samples move by 1-5), "requests" (a
// counter, +0..20 per sample) and "load" (two decimals, every other sample
// moves by 0.01-0.05). Timestamps are exact multiples of 10 s except 1 in
// 100, which is a millisecond late.
//
// The replication log: "log=replicated" keeps no flushed entry, as the
// leader of a standalone shard, or of one whose followers all have
// everything, sets its trim floor; "log=retained" keeps what the retention
// bounds keep for a follower that has acknowledged nothing, up to 32 MiB
// per shard by default.
func BenchmarkDisk40kSeries(b *testing.B) {
	for _, sub := range []struct {
		name  string
		floor uint64
	}{{"log=replicated", math.MaxUint64}, {"log=retained", 0}} {
		b.Run(sub.name, func(b *testing.B) {
			for b.Loop() {
				benchDisk(b, sub.floor)
			}
		})
	}
}

func benchDisk(b *testing.B, floor uint64) {
	const perSeries, batch = 250, 5000
	hosts := 10_000
	// CAIRN_BENCH_HOSTS scales the run down for quick profiling.
	if n, err := strconv.Atoi(os.Getenv("CAIRN_BENCH_HOSTS")); err == nil && n > 0 {
		hosts = n
	}
	metrics := []string{"up", "conns", "requests", "load"}
	nSeries := hosts * len(metrics)
	total := nSeries * perSeries
	tags := make([][]lineproto.Tag, hosts)
	for h := range tags {
		tags[h] = []lineproto.Tag{{Key: "dc", Value: fmt.Sprintf("dc%d", h%2)},
			{Key: "host", Value: fmt.Sprintf("host-%05d", h)}, {Key: "region", Value: fmt.Sprintf("region-%d", h%8)}}
	}
	rng := rand.New(rand.NewPCG(42, 42))
	vals := make([]float64, nSeries)
	for i := range vals {
		switch i % 4 {
		case 0:
			vals[i] = 1
		case 1:
			vals[i] = float64(rng.IntN(500))
		case 2:
			vals[i] = float64(rng.IntN(1_000_000))
		case 3:
			vals[i] = float64(rng.IntN(400)) / 100
		}
	}
	next := func(i int) float64 {
		v := vals[i]
		switch i % 4 {
		case 0:
			if rng.IntN(200) == 0 {
				v = 1 - v
			}
		case 1:
			if rng.IntN(3) == 0 {
				v = math.Max(0, v+float64(rng.IntN(11)-5))
			}
		case 2:
			v += float64(rng.IntN(21))
		case 3:
			if rng.IntN(2) == 0 {
				v = math.Round((v+float64(rng.IntN(11)-5)/100)*100) / 100
			}
		}
		vals[i] = v
		return v
	}

	dir := b.TempDir()
	e, err := NewBoltEngine(dir)
	if err != nil {
		b.Fatal(err)
	}
	s, err := e.Open("bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	s.SetTrimFloor(floor)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	points := make([]lineproto.Point, 0, batch)
	start := time.Now()
	for k := range perSeries {
		for i := range nSeries {
			ts := base + int64(k)*10e9
			if rng.IntN(100) == 0 {
				ts += 1e6
			}
			points = append(points, lineproto.Point{Metric: metrics[i%4], Tags: tags[i/4], Field: "value", TS: ts, Value: next(i)})
			if len(points) == batch {
				if err := s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: points}); err != nil {
					b.Fatal(err)
				}
				points = make([]lineproto.Point, 0, batch)
			}
		}
	}
	elapsed := time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	before, beforeAlloc := dirSize(b, dir)

	e, err = NewBoltEngine(dir)
	if err != nil {
		b.Fatal(err)
	}
	s, err = e.Open("bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	s.SetTrimFloor(floor)
	if c, ok := s.(interface{ Compact() error }); ok {
		if err := c.Compact(); err != nil {
			b.Fatal(err)
		}
	}
	got, err := s.Query("load", map[string]string{"host": "host-00042"}, 0, math.MaxInt64)
	if err != nil || len(got) != 1 || len(got[0].Points) != perSeries {
		b.Fatalf("query after compaction: %v, %v", err, got)
	}
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	after, afterAlloc := dirSize(b, dir)
	if keep := os.Getenv("CAIRN_BENCH_KEEP"); keep != "" {
		_ = os.Rename(filepath.Join(dir, "bench", "0.db"), keep)
	}
	b.ReportMetric(float64(before)/float64(total), "B/pt-written")
	b.ReportMetric(float64(after)/float64(total), "B/pt-compacted")
	b.ReportMetric(float64(beforeAlloc)/float64(total), "alloc-B/pt-written")
	b.ReportMetric(float64(afterAlloc)/float64(total), "alloc-B/pt-compacted")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "points/s")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}

// dirSize returns the files' sizes and the disk space allocated to them
// (bbolt grows files sparsely).
func dirSize(b *testing.B, dir string) (int64, int64) {
	var n, alloc int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				alloc += st.Blocks * 512
			}
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n, alloc
}
