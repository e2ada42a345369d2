package broker_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkWriteSeriesScale is the write path of a standalone node below
// HTTP, with the concurrency held fixed and only the number of series
// varied: 8 writers send 5,000-line batches shaped like loadgen's
// (cpu,host=...,region=... usage=1.5 <ts>) through broker.Data.Write (line
// protocol parsing, the per-shard split) into a real bbolt engine of 8
// shards with its default memory budget, flushes and background compaction
// included. Every run writes the same number of points; with 40k series
// each batch is one timestamp of 5,000 series, with 5k series eight
// timestamps of 625. CPU per point should not depend on the series count.
//
// CAIRN_BENCH_POINTS sets the points per run (default 8M).
//
// The writers=1 runs keep the batch itself the same too: one writer cycles
// through its series, so every batch is 5,000 distinct series (all of them
// at one timestamp with 5k series; one eighth of them with 40k), as each of
// loadgen's senders sends; only how many series the shards hold differs.
func BenchmarkWriteSeriesScale(b *testing.B) {
	for _, writers := range []int{8, 1} {
		for _, series := range []int{5_000, 40_000} {
			name := fmt.Sprintf("series=%d", series)
			if writers != scaleWriters {
				name = fmt.Sprintf("writers=%d/series=%d", writers, series)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					benchWriteScale(b, series, writers, scaleShards)
				}
			})
		}
	}
}

// BenchmarkWriteShardScale is BenchmarkWriteSeriesScale's 8 writers and
// 40k series into 8 or 32 shards: at 32 a 5,000-point batch becomes 32
// entries of about 156 points, and CPU per point should not depend on that.
func BenchmarkWriteShardScale(b *testing.B) {
	for _, shards := range []int{8, 32} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			for b.Loop() {
				benchWriteScale(b, 40_000, scaleWriters, shards)
			}
		})
	}
}

const scaleShards, scaleWriters, scaleBatch = 8, 8, 5000

func benchWriteScale(b *testing.B, series, writers, numShards int) {
	total := 8_000_000
	if n, err := strconv.Atoi(os.Getenv("CAIRN_BENCH_POINTS")); err == nil && n > 0 {
		total = n
	}
	eng, err := engine.NewBoltEngine(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	shards := make([]engine.Shard, numShards)
	locks := make([]sync.Mutex, numShards)
	states := make([]models.ShardState, numShards)
	for i := range shards {
		if shards[i], err = eng.Open("w1", i); err != nil {
			b.Fatal(err)
		}
		shards[i].SetTrimFloor(^uint64(0)) // a lone replica: nobody needs the flushed log
		states[i] = models.ShardState{ID: i, Leader: "self", Term: 1, Status: models.StatusOnline}
	}
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"w1": {Name: "w1", StorageCluster: "default", NumShards: numShards, ReplicaFactor: 1}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"w1": {DB: "w1", Shards: states}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"}}}),
	}
	// appendTo is what the storage role's write does: stage, number and
	// queue (applyMu), wait.
	appendTo := func(shard int, term int64, pts []lineproto.Point, pre *engine.Prepared) error {
		s := shards[shard]
		st, err := s.Stage(engine.Entry{Term: uint64(term), Points: pts, Prepared: pre})
		if err != nil {
			return err
		}
		locks[shard].Lock()
		_, wait, err := s.Enqueue(st)
		locks[shard].Unlock()
		if err != nil {
			return err
		}
		return wait()
	}
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Self: "self",
		Local: localShards{
			write: func(_ context.Context, _ string, shard int, term int64, pts []lineproto.Point) error {
				return appendTo(shard, term, pts, nil)
			},
			prepare: func(pts []lineproto.Point) broker.PreparedWrite {
				pre := engine.Prepare(pts)
				return func(_ context.Context, _ string, shard int, term int64) error { return appendTo(shard, term, pts, pre) }
			},
		},
	}

	measureWrites(b, d, total, series, writers)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureWrites has writers send total points of loadgen's shape (5,000-line
// batches of their share of series, database w1) through d, and reports
// the CPU, wall time, allocation per point and the heap in use after.
func measureWrites(b *testing.B, d *broker.Data, total, series, writers int) {
	perWriter := series / writers
	batches := total / scaleBatch / writers
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefixes := make([][]byte, perWriter)
			for i := range prefixes {
				h := w*perWriter + i
				prefixes[i] = fmt.Appendf(nil, "cpu,host=s%dh%d,region=r%d usage=1.5 ", w, h/5, h%5)
			}
			ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			body := make([]byte, 0, scaleBatch*48)
			next := 0 // the writer's series cycle; ts moves on after each round
			for range batches {
				body = body[:0]
				for range scaleBatch {
					body = append(body, prefixes[next]...)
					body = strconv.AppendInt(body, ts, 10)
					body = append(body, '\n')
					if next++; next == len(prefixes) {
						next, ts = 0, ts+10_000
					}
				}
				if err := d.Write(context.Background(), "w1", "ms", body); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	runtime.ReadMemStats(&ms1)
	points := float64(batches * writers * scaleBatch)
	b.ReportMetric(float64(cpu.Nanoseconds())/points, "cpu-ns/pt")
	b.ReportMetric(float64(elapsed.Nanoseconds())/points, "wall-ns/pt")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/points, "allocs/pt")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/points, "B/pt")
	b.ReportMetric(float64(ms1.HeapInuse)/(1<<20), "heap-MiB")
}
