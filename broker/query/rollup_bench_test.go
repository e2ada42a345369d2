package query

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
)

// millionPoints is the size of issue 27's rollup figure: 1M points of one
// series, a second apart (11.6 days).
const millionPoints = 1_000_000

// writeMillion writes millionPoints of cpu,host=a v into a new shard of a
// new engine under dir, in entries of 10k points, with a 5m rollup level or
// none, and flushes them.
func writeMillion(b *testing.B, dir string, rollup bool) engine.Shard {
	b.Helper()
	eng, err := engine.NewBoltEngine(dir, engine.WithFlushPoints(100_000), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close() })
	sh, err := eng.Open("db", 0)
	if err != nil {
		b.Fatal(err)
	}
	if rollup {
		if err := sh.(engine.Rollups).SetRollups([]time.Duration{5 * time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	tags := []lineproto.Tag{{Key: "host", Value: "a"}}
	const batch = 10_000
	for i := 0; i < millionPoints; i += batch {
		pts := make([]lineproto.Point, batch)
		for j := range pts {
			n := int64(i + j)
			pts[j] = lineproto.Point{Metric: "cpu", Tags: tags, Field: "v", TS: n * int64(time.Second), Value: float64((n*7)%101) / 2}
		}
		if err := sh.Apply(engine.Entry{TxnID: sh.LastTxnID() + 1, Term: 1, Points: pts}); err != nil {
			b.Fatal(err)
		}
	}
	// One more entry of another measurement freezes the last one; the
	// flush of the frozen memtable is waited for.
	if err := sh.Apply(engine.Entry{TxnID: sh.LastTxnID() + 1, Term: 1, Points: []lineproto.Point{{Metric: "mem", Field: "v", TS: 0, Value: 1}}}); err != nil {
		b.Fatal(err)
	}
	for range 2 {
		if err := sh.(engine.FlushWaiter).WaitFlush(); err != nil {
			b.Fatal(err)
		}
	}
	return sh
}

// BenchmarkRollupMillionPoints measures issue 27's figure: writing 1M points
// of a series with and without a 5m rollup (the cells are made by the
// flushes), and GROUP BY time(1h) of mean, max and count over all of them
// from the raw blocks, then, once the raw points expired, from the rollup:
// the same buckets (checked), and the blocks and cells each read.
//
//	go test -run XXX -bench RollupMillionPoints -benchtime 3x ./broker/query/
func BenchmarkRollupMillionPoints(b *testing.B) {
	for _, rollup := range []bool{false, true} {
		b.Run(fmt.Sprintf("write/rollup=%v", rollup), func(b *testing.B) {
			for range b.N {
				writeMillion(b, b.TempDir(), rollup)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/millionPoints, "ns/point")
		})
	}
	sh := writeMillion(b, b.TempDir(), true)
	now := time.Unix(0, millionPoints*int64(time.Second)).Add(3 * time.Hour)
	// The range ends on a 5m interval's end (a cell the end cuts is left
	// out): 999,900 of the points.
	end := millionPoints / 300 * 300 * int64(time.Second)
	q := fmt.Sprintf("SELECT mean(v), max(v), count(v) FROM cpu WHERE time >= 0 AND time < %d GROUP BY time(1h)", end)
	stmt, err := influxql.ParseStatement(q)
	if err != nil {
		b.Fatal(err)
	}
	p, err := PlanSelect(stmt.(*influxql.SelectStatement), now)
	if err != nil {
		b.Fatal(err)
	}
	var raw *ShardResult
	b.Run("query/raw", func(b *testing.B) {
		blocks := engine.BlockReads()
		for range b.N {
			if raw, err = Evaluate(sh.(Source), &p.Req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(engine.BlockReads()-blocks)/float64(b.N), "blocks/op")
	})
	rawFrom := now.Add(-2 * time.Hour).UnixNano()
	if _, _, err := sh.(engine.Expirer).ExpireBefore(rawFrom); err != nil {
		b.Fatal(err)
	}
	req, ok := PlanRollup(&p.Req, []models.Rollup{{Interval: models.Duration(5 * time.Minute)}}, rawFrom, now)
	if !ok {
		b.Fatal("no rollup plan")
	}
	b.Run("query/rollup", func(b *testing.B) {
		blocks, cells := engine.BlockReads(), engine.RollupReads()
		var got *ShardResult
		for range b.N {
			if got, err = Evaluate(sh.(Source), req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(engine.BlockReads()-blocks)/float64(b.N), "blocks/op")
		b.ReportMetric(float64(engine.RollupReads()-cells)/float64(b.N), "cells/op")
		if want, have := meanMaxCount(raw), meanMaxCount(got); !reflect.DeepEqual(want, have) || len(want) != 278 {
			b.Fatalf("the rollup's %d buckets differ from the raw points' %d", len(have), len(want))
		}
	})
}

// meanMaxCount is what the benchmark's statement shows of each bucket.
func meanMaxCount(r *ShardResult) map[string][3]float64 {
	out := map[string][3]float64{}
	for k, p := range bucketValues(r) {
		out[k] = [3]float64{p.Sum / float64(p.Count), p.X.Max, float64(p.Count)}
	}
	return out
}
