package query

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

// TestEvaluateReadsOnlyNeededBlocks (issue 14): an aggregation over a real
// shard decodes only the blocks of the series its tag filter selects that
// overlap its time range, and its answer still merges the unflushed
// memtable points; without the filter or the range it reads every block.
func TestEvaluateReadsOnlyNeededBlocks(t *testing.T) {
	eng, err := engine.NewBoltEngine(t.TempDir(), engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(t, err)
	defer eng.Close()
	sh, err := eng.Open("db", 0)
	require.NoError(t, err)
	hour := int64(time.Hour)
	// 11 entries of one hour of 1-minute points for 3 hosts: each entry
	// flushes the one before, so hours 0-9 are one block per host and
	// hour 10 waits in the memtable.
	for h := range int64(11) {
		var pts []lineproto.Point
		for host := range 3 {
			tags := []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("h%d", host)}}
			for m := range int64(60) {
				pts = append(pts, lineproto.Point{Metric: "cpu", Tags: tags, Field: "v", TS: h*hour + m*60e9, Value: float64(h*100 + m)})
			}
		}
		require.NoError(t, sh.Apply(engine.Entry{TxnID: uint64(h + 1), Term: 1, Points: pts}))
	}
	require.NoError(t, sh.(engine.FlushWaiter).WaitFlush()) // hour 9 is flushed beside the commits
	src := sh.(Source)
	run := func(q string) (*ShardResult, uint64) {
		p, err := plan(t, q, time.Unix(0, 0))
		require.NoError(t, err, q)
		before := engine.BlockReads()
		r, err := Evaluate(src, &p.Req)
		require.NoError(t, err, q)
		return r, engine.BlockReads() - before
	}
	// Hours 3 and 4 of h1: two blocks, and the means of each half hour.
	r, reads := run(fmt.Sprintf("SELECT mean(v) FROM cpu WHERE host = 'h1' AND time >= %d AND time < %d GROUP BY time(30m)", 3*hour, 5*hour))
	require.EqualValues(t, 2, reads)
	require.Len(t, r.Groups, 1)
	f := r.Groups[0].Fields[0]
	for i, want := range []float64{314.5, 344.5, 414.5, 444.5} {
		b := f.At(3*hour + int64(i)*hour/2)
		require.NotNil(t, b, i)
		require.EqualValues(t, 30, b.Count)
		require.InDelta(t, want, b.Sum/float64(b.Count), 1e-9)
	}
	// The memtable's hour costs no block read, yet is in the answer.
	r, reads = run(fmt.Sprintf("SELECT count(v) FROM cpu WHERE time >= %d GROUP BY host", 10*hour))
	require.Zero(t, reads)
	require.Len(t, r.Groups, 3)
	require.EqualValues(t, 60, r.Groups[2].Fields[0].Parts[0].Count)
	// A regex filter is not a posting list: every host's blocks in range.
	_, reads = run(fmt.Sprintf("SELECT max(v) FROM cpu WHERE host =~ /h[12]/ AND time >= %d AND time < %d", 3*hour, 4*hour))
	require.EqualValues(t, 2, reads, "the regex drops h0 before its blocks are read")
	_, reads = run("SELECT sum(v) FROM cpu WHERE time >= 0")
	require.EqualValues(t, 30, reads)
}

// BenchmarkEvaluateSum: one shard's part of the benchmark (625 of
// the 5,000 series, a day of 1-minute points, flushed into blocks): the sum
// over every series by 5 minutes, through the engine's scan.
func BenchmarkEvaluateSum(b *testing.B) {
	eng, err := engine.NewBoltEngine(b.TempDir(), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(b, err)
	defer eng.Close()
	sh, err := eng.Open("db", 0)
	require.NoError(b, err)
	end := time.Unix(1_700_000_000, 0)
	start := end.Add(-24 * time.Hour)
	txn := uint64(0)
	for hour := range 24 {
		var pts []lineproto.Point
		for h := range 625 {
			tags := []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("h%04d", h*8)}}
			for m := range 60 {
				i := hour*60 + m
				pts = append(pts, lineproto.Point{Metric: "cpu", Tags: tags, Field: "v", TS: start.Add(time.Duration(i+1) * time.Minute).UnixNano(), Value: float64((i*7 + h) % 1000)})
			}
		}
		txn++
		require.NoError(b, sh.Apply(engine.Entry{TxnID: txn, Term: 1, Points: pts}))
	}
	require.NoError(b, sh.(interface{ Compact() error }).Compact())
	for _, q := range []string{"SELECT sum(v) FROM cpu WHERE time > now()-1d GROUP BY time(5m)", "SELECT mean(v) FROM cpu WHERE time > now()-1d GROUP BY time(5m), host"} {
		stmt, err := influxql.ParseStatement(q)
		require.NoError(b, err)
		p, err := PlanSelect(stmt.(*influxql.SelectStatement), end)
		require.NoError(b, err)
		b.Run(q[7:11], func(b *testing.B) {
			c0 := processCPU(b)
			for range b.N {
				_, err := Evaluate(sh.(Source), &p.Req)
				require.NoError(b, err)
			}
			// CPU time, which the shared machine's load disturbs less than
			// wall time (GC threads included).
			b.ReportMetric(float64(processCPU(b)-c0)/float64(b.N*625*1440), "cpu-ns/point")
		})
	}
}

// processCPU is the process's user+system CPU time so far, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}
