package engine

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

// levels10and60 are the test's rollup levels: cells of 10 ns and 60 ns.
var levels10and60 = []time.Duration{10, 60}

func ipt(metric, tags, field string, ts, v int64) lineproto.Point {
	p := pt(metric, tags, field, ts, float64(v))
	p.Type, p.Int = models.FieldInteger, v
	return p
}

func spt(metric, tags, field string, ts int64, v string) lineproto.Point {
	p := pt(metric, tags, field, ts, 0)
	p.Type, p.Str = models.FieldString, v
	return p
}

// rawCells is the oracle: every numeric series of metric's cells of
// interval iv, computed from the raw points the shard answers in [lo, hi].
func rawCells(t testing.TB, s Shard, metric string, iv, lo, hi int64) map[string][]models.RollupCell {
	t.Helper()
	out := map[string][]models.RollupCell{}
	err := s.(Scanner).Scan(metric, nil, lo, hi, func(string) bool { return true }, func(key string, pts []SeriesPoint) error {
		var cells []models.RollupCell
		for _, p := range pts {
			if !p.Type.Numeric() {
				return nil
			}
			start := cellStart(p.TS, iv)
			if len(cells) == 0 || cells[len(cells)-1].Start != start {
				cells = append(cells, models.RollupCell{Start: start, Type: p.Type})
			}
			cells[len(cells)-1].Add(p.TS, p.Value)
		}
		out[key] = cells
		return nil
	})
	require.NoError(t, err)
	return out
}

// storedCells is what ScanRollup answers of metric's level iv in [lo, hi].
func storedCells(t testing.TB, s Shard, metric string, iv, lo, hi int64) map[string][]models.RollupCell {
	t.Helper()
	out := map[string][]models.RollupCell{}
	err := s.(Rollups).ScanRollup(time.Duration(iv), metric, nil, lo, hi, func(string) bool { return true },
		func(key string, cells []models.RollupCell) error {
			out[key] = append([]models.RollupCell(nil), cells...)
			return nil
		})
	require.NoError(t, err)
	return out
}

// requireRolled checks both levels' cells against the raw points over all
// time.
func requireRolled(t testing.TB, s Shard, msg string) {
	t.Helper()
	for _, iv := range []int64{10, 60} {
		require.Equal(t, rawCells(t, s, "cpu", iv, math.MinInt64, math.MaxInt64),
			storedCells(t, s, "cpu", iv, math.MinInt64, math.MaxInt64), "%s: level %d", msg, iv)
	}
}

// TestRollupCellsMatchRawPoints: the cells a shard keeps equal the
// aggregates computed from its raw points, through appends across flushes
// (a cell filled by two flushes), late points after a cell's last one
// (merged) and inside it (recomputed), points written again, a rollback of
// flushed entries, integer fields (strings have no cells), a reopen, and
// a snapshot restored elsewhere.
func TestRollupCellsMatchRawPoints(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	require.NoError(t, s.(Rollups).SetRollups(levels10and60))
	write := func(from, to int64, scale float64) {
		for ts := from; ts <= to; ts++ {
			apply(t, s, 1, pt("cpu", "host=a", "value", ts, scale*float64(ts%17)), ipt("cpu", "host=b", "n", ts, ts%5-2),
				spt("cpu", "host=c", "s", ts, "x"))
		}
	}
	write(1, 25, 1)
	flushNow(t, s)
	requireRolled(t, s, "one flush")
	write(26, 45, 1) // the cell 20..29 gets the rest of its points
	flushNow(t, s)
	requireRolled(t, s, "appended")
	apply(t, s, 1, pt("cpu", "host=a", "value", 5, 100), pt("cpu", "host=a", "value", 33, -4.5), // written again
		pt("cpu", "host=a", "value", 47, 7), pt("cpu", "host=d", "value", 3, 2)) // after cell 40's last; a new series
	flushNow(t, s)
	requireRolled(t, s, "late and rewritten points")
	require.Equal(t, int64(7), storedCells(t, s, "cpu", 10, 40, 40)[`cpu,host=a#value`][0].Count, "40..45 and the late 47")
	require.Empty(t, storedCells(t, s, "cpu", 10, math.MinInt64, math.MaxInt64)["cpu,host=c#s"], "no cells of strings")

	// A rollback of a flushed entry puts the cells back with the points.
	before := s.LastTxnID()
	apply(t, s, 1, pt("cpu", "host=a", "value", 6, 1e6), pt("cpu", "host=a", "value", 200, 1))
	flushNow(t, s)
	require.NoError(t, s.TruncateAfter(before))
	requireRolled(t, s, "after a rollback")
	require.Empty(t, storedCells(t, s, "cpu", 10, 200, 200), "the cell only the rolled back entry made is gone")

	want := storedCells(t, s, "cpu", 10, math.MinInt64, math.MaxInt64)
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	require.Equal(t, want, storedCells(t, s, "cpu", 10, math.MinInt64, math.MaxInt64), "kept across a reopen")
	write(51, 70, 0.5)
	flushNow(t, s)
	requireRolled(t, s, "after a reopen")

	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	_, dst := openShard1(t, manual...)
	require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))
	requireRolled(t, dst, "restored from a snapshot")
	require.Equal(t, storedCells(t, s, "cpu", 60, math.MinInt64, math.MaxInt64), storedCells(t, dst, "cpu", 60, math.MinInt64, math.MaxInt64))
	apply(t, dst, 1, pt("cpu", "host=a", "value", 71, 3))
	flushNow(t, dst)
	requireRolled(t, dst, "a restored shard keeps rolling up")
}

// TestRollupOutlivesRawPoints: after the raw points expire the cells still
// answer with what they held, reading only cells; a late point for an
// expired interval is merged into its cell; a delete recomputes the cells
// it touches while the raw points are there and drops those it touches
// under the expiry; a level's own expiry drops its cells.
func TestRollupOutlivesRawPoints(t *testing.T) {
	_, s := openShard1(t, manual...)
	require.NoError(t, s.(Rollups).SetRollups(levels10and60))
	writeHosts(t, s, 1, 120)
	flushNow(t, s)
	writeHosts(t, s, 121, 240)
	flushNow(t, s)
	del(t, s, 1, hostA(35, 47))
	del(t, s, 1, hostA(math.MinInt64, 3)) // all of a's cell 0..9 but 0-3; level 60's 0..59 recomputed
	flushNow(t, s)
	requireRolled(t, s, "after deletes")
	old := storedCells(t, s, "cpu", 10, math.MinInt64, 119)
	require.Equal(t, rawCells(t, s, "cpu", 10, math.MinInt64, 119), old)

	n, _, err := s.(Expirer).ExpireBefore(121)
	require.NoError(t, err)
	require.Positive(t, n)
	raw, err := s.Query("cpu", nil, 0, 120)
	require.NoError(t, err)
	require.Empty(t, raw, "the raw points before 121 are gone")
	blocks, cells := BlockReads(), RollupReads()
	require.Equal(t, old, storedCells(t, s, "cpu", 10, math.MinInt64, 119), "the cells answer for them")
	require.Equal(t, blocks, BlockReads(), "a rollup scan reads no block")
	require.Greater(t, RollupReads(), cells)

	// A late point into an expired interval: merged, not recomputed from
	// the (now partial) raw points.
	apply(t, s, 1, pt("cpu", "host=b", "value", 55, 1000))
	flushNow(t, s)
	got := storedCells(t, s, "cpu", 10, 50, 50)["cpu,host=b#value"][0]
	want := old["cpu,host=b#value"][5]
	want.Add(55, 1000)
	require.Equal(t, want, got)

	// A delete under the expiry never leaves its points in a cell: the
	// cells it touches go whole.
	del(t, s, 1, wire2(55, 55))
	flushNow(t, s)
	require.Empty(t, storedCells(t, s, "cpu", 10, 50, 50)["cpu,host=b#value"])
	require.Empty(t, storedCells(t, s, "cpu", 60, 0, 0)["cpu,host=b#value"])
	require.NotEmpty(t, storedCells(t, s, "cpu", 10, 60, 60)["cpu,host=b#value"])

	// The level's own expiry.
	dropped, err := s.(Rollups).ExpireRollup(10, 130)
	require.NoError(t, err)
	require.Positive(t, dropped)
	require.Empty(t, storedCells(t, s, "cpu", 10, math.MinInt64, 119))
	require.NotEmpty(t, storedCells(t, s, "cpu", 10, 120, 240))
	require.NotEmpty(t, storedCells(t, s, "cpu", 60, 60, 60), "the coarser level keeps its own")
}

// wire2 deletes host b's points in [lo, hi].
func wire2(lo, hi int64) wire.Delete {
	d := hostA(lo, hi)
	d.Tags[0].Value = "b"
	return d
}

// TestRollupLevelsChange: a shard file without rollup levels (as every file
// written before them) opens, flushes and answers no cells; levels set later
// roll up the points flushed from then on, and FillRollups those held
// already; a level removed goes with its cells; the same levels again
// change nothing.
func TestRollupLevelsChange(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHosts(t, s, 1, 20)
	flushNow(t, s)
	require.Empty(t, storedCells(t, s, "cpu", 10, math.MinInt64, math.MaxInt64))
	r := s.(Rollups)
	require.Error(t, r.SetRollups([]time.Duration{10, 15}), "15 is not a multiple of 10")
	require.NoError(t, r.SetRollups(levels10and60))
	writeHosts(t, s, 21, 40)
	flushNow(t, s)
	require.Equal(t, rawCells(t, s, "cpu", 10, 30, 40), storedCells(t, s, "cpu", 10, 30, 40))
	require.Empty(t, storedCells(t, s, "cpu", 10, 0, 19), "points flushed before the level: not rolled up yet")
	more, err := r.FillRollups()
	require.NoError(t, err)
	require.False(t, more, "one step fills this small shard")
	requireRolled(t, s, "filled from the points held")
	more, err = r.FillRollups()
	require.NoError(t, err)
	require.False(t, more, "nothing left")

	require.NoError(t, r.SetRollups(levels10and60), "the same levels again")
	require.Equal(t, rawCells(t, s, "cpu", 10, 30, 40), storedCells(t, s, "cpu", 10, 30, 40))
	require.NoError(t, r.SetRollups([]time.Duration{60}))
	require.Empty(t, storedCells(t, s, "cpu", 10, math.MinInt64, math.MaxInt64))
	require.NotEmpty(t, storedCells(t, s, "cpu", 60, math.MinInt64, math.MaxInt64))
	require.NoError(t, r.SetRollups(nil))
	require.Empty(t, storedCells(t, s, "cpu", 60, math.MinInt64, math.MaxInt64))
}

// TestRollupReplicasAgree: two replicas applying the same log, flushed at
// different points (one after every entry, the other once at the end, so
// one merges cells the other computes in one go and recomputes on a
// rewrite the other never sees as one), keep the same cells: a follower
// computes its rollups from the points it applies, and nothing else needs
// replicating.
func TestRollupReplicasAgree(t *testing.T) {
	e, a := openShard1(t, manual...)
	b, err := e.Open("db2", 0)
	require.NoError(t, err)
	var entries []Entry
	for i := range int64(40) {
		ts := i*7 + 3
		if i%9 == 8 {
			ts = i * 3 // late, into cells already rolled
		}
		entries = append(entries, Entry{Term: 1, Points: []lineproto.Point{
			pt("cpu", "host=a", "value", ts, float64(i%11)), ipt("cpu", "host=b", "n", ts, i%4)}})
	}
	for _, s := range []Shard{a, b} {
		require.NoError(t, s.(Rollups).SetRollups(levels10and60))
	}
	for _, en := range entries {
		for _, s := range []Shard{a, b} {
			en.TxnID = s.LastTxnID() + 1
			require.NoError(t, s.Apply(en))
		}
		flushNow(t, a)
	}
	flushNow(t, b)
	for _, iv := range []int64{10, 60} {
		require.Equal(t, storedCells(t, a, "cpu", iv, math.MinInt64, math.MaxInt64), storedCells(t, b, "cpu", iv, math.MinInt64, math.MaxInt64))
	}
	requireRolled(t, a, "flushed after every entry")
	requireRolled(t, b, "flushed once")
}

// TestRollupFillInSteps: a level added to a shard holding points is filled
// from them in bounded steps, each a transaction, beside flushes; above the
// raw expiry only: a cell whose points are partly gone is not made up.
func TestRollupFillInSteps(t *testing.T) {
	defer func(b int) { fillBudget = b }(fillBudget)
	fillBudget = 50
	_, s := openShard1(t, manual...)
	r := s.(Rollups)
	require.NoError(t, r.SetRollups([]time.Duration{10}))
	for from := int64(1); from < 240; from += 60 {
		writeHosts(t, s, from, from+59)
		flushNow(t, s)
	}
	_, _, err := s.(Expirer).ExpireBefore(121)
	require.NoError(t, err)
	require.NoError(t, r.SetRollups(levels10and60))
	steps := 0
	for more := true; more; steps++ {
		more, err = r.FillRollups()
		require.NoError(t, err)
		if steps == 0 {
			writeHosts(t, s, 241, 250) // a flush between two steps
			flushNow(t, s)
		}
	}
	require.GreaterOrEqual(t, steps, 3, "a step per series of 50 points or more")
	require.Equal(t, rawCells(t, s, "cpu", 60, 180, 250), storedCells(t, s, "cpu", 60, 180, 250))
	require.Equal(t, rawCells(t, s, "cpu", 10, 130, 250), storedCells(t, s, "cpu", 10, 130, 250))
	require.Empty(t, storedCells(t, s, "cpu", 60, 0, 120), "cells 0 and 60 lost points to the expiry, 120 too")
	require.NotEmpty(t, storedCells(t, s, "cpu", 10, 0, 110), "the finer level kept its cells")
}

// TestRollupRandomHistory: seeded random histories of writes (in order,
// late, written again), deletes and flushes at random points keep every
// level's cells equal to the aggregates of the raw points after each flush.
func TestRollupRandomHistory(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 27))
			_, s := openShard1(t, manual...)
			require.NoError(t, s.(Rollups).SetRollups(levels10and60))
			hosts := []string{"host=a", "host=b", "host=c"}
			next := int64(0)
			for range 300 {
				switch r := rnd.IntN(20); {
				case r < 12: // in order, a few points per host
					var pts []lineproto.Point
					for range 1 + rnd.IntN(5) {
						next += 1 + int64(rnd.IntN(4))
						pts = append(pts, pt("cpu", hosts[rnd.IntN(3)], "value", next, float64(rnd.IntN(40))/2))
					}
					apply(t, s, 1, pts...)
				case r < 16: // late, or over a point already there
					apply(t, s, 1, pt("cpu", hosts[rnd.IntN(3)], "value", rnd.Int64N(next+1), float64(rnd.IntN(40))/2))
				case r < 17:
					lo := rnd.Int64N(next + 1)
					d := hostA(lo, lo+rnd.Int64N(30))
					d.Tags[0].Value = string(rune('a' + rnd.IntN(3)))
					del(t, s, 1, d)
				default:
					flushNow(t, s)
					requireRolled(t, s, "after a flush")
				}
			}
			flushNow(t, s)
			requireRolled(t, s, "at the end")
		})
	}
}
