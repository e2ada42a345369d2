package engine

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func withPacks() Option { return func(o *options) { o.packs = true } }

// packStats counts the shard's packs, the series they hold and its blocks,
// and reads its format mark.
func packStats(t testing.TB, s Shard) (packs, packed, blocks int, format uint64) {
	t.Helper()
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		format = fileFormat(tx)
		blocks = tx.Bucket(bucketBlocks).Stats().KeyN
		b := tx.Bucket(bucketPacks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			_, dir, _, err := parsePack(v)
			packs++
			packed += len(dir) / packDirEntry
			return err
		})
	}))
	return packs, packed, blocks, format
}

// twoLayouts opens a shard that writes packs and one that does not, in
// engines of their own, with manual flushes.
func twoLayouts(t *testing.T) (withP, without Shard) {
	_, withP = openShardAt(t, t.TempDir(), append(manual, withPacks())...)
	_, without = openShard1(t, manual...)
	return withP, without
}

// TestPacksRoundTrip: a flush of series with few points writes them into a
// pack, not blocks of their own, and marks the file format 3; every field
// type reads back as the per-series layout answers, through Query and Scan,
// before and after a reopen. A series with many points keeps its blocks.
func TestPacksRoundTrip(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		for i := range 3 {
			apply(t, s, 1, telegrafSystem(int64(10+i), i)...)
		}
		for ts := range int64(50) {
			apply(t, s, 1, pt("big", "host=a", "value", ts, float64(ts)))
		}
		flushNow(t, s)
		for i := 3; i < 5; i++ { // a second pack over the first
			apply(t, s, 1, telegrafSystem(int64(10+i), i)...)
		}
		flushNow(t, s)
	}
	packs, packed, blocks, format := packStats(t, withP)
	require.Equal(t, 2, packs)
	require.Equal(t, 12, packed, "6 series in each flush's pack")
	require.Equal(t, 1, blocks, "the series with 50 points keeps its block")
	require.EqualValues(t, packFormat, format)
	_, _, blocks, format = packStats(t, without)
	require.Equal(t, 13, blocks)
	require.EqualValues(t, openFormat, format)

	for _, m := range []string{"system", "disk", "net", "big"} {
		require.Equal(t, queryAll(t, without, m), queryAll(t, withP, m), m)
	}
	// Reopened: the pack heads are loaded from the file.
	dir := t.TempDir()
	e, s := openShardAt(t, dir, append(manual, withPacks())...)
	for i := range 3 {
		apply(t, s, 1, telegrafSystem(int64(10+i), i)...)
	}
	flushNow(t, s)
	for i := 3; i < 5; i++ {
		apply(t, s, 1, telegrafSystem(int64(10+i), i)...)
	}
	for ts := range int64(50) {
		apply(t, s, 1, pt("big", "host=a", "value", ts, float64(ts)))
	}
	flushNow(t, s)
	require.NoError(t, e.Close())
	_, reopened := openShardAt(t, dir, manual...)
	for _, m := range []string{"system", "disk", "net", "big"} {
		require.Equal(t, queryAll(t, without, m), queryAll(t, reopened, m), m)
	}
}

// TestPacksGateOff: a shard not told packs are allowed writes none, and its
// file keeps the format the release before reads; told, its next flush
// packs.
func TestPacksGateOff(t *testing.T) {
	_, s := openShard1(t, manual...)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=b", "value", 1, 2))
	flushNow(t, s)
	packs, _, blocks, format := packStats(t, s)
	require.Zero(t, packs)
	require.Equal(t, 2, blocks)
	require.EqualValues(t, 2, format)

	s.(PackWriter).AllowPacks(true)
	apply(t, s, 1, pt("m", "h=a", "value", 2, 1), pt("m", "h=b", "value", 2, 2))
	flushNow(t, s)
	packs, packed, blocks, format := packStats(t, s)
	require.Equal(t, 1, packs)
	require.Equal(t, 2, packed)
	require.Equal(t, 2, blocks)
	require.EqualValues(t, 3, format)
}

// TestPacksOverwriteAndRollback: a later flush's point at a packed
// timestamp wins (the packed points of the range move into the series'
// blocks); rolling the later entries back restores the packed values, and
// rolling back the entry whose points sit in a pack removes them.
func TestPacksOverwriteAndRollback(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		apply(t, s, 1, pt("m", "h=a", "value", 10, 1), pt("m", "h=b", "value", 10, 1)) // txn 1
		apply(t, s, 1, pt("m", "h=a", "value", 20, 1))                                 // txn 2
		flushNow(t, s)
		apply(t, s, 1, pt("m", "h=a", "value", 10, 2), pt("m", "h=a", "value", 5, 2)) // txn 3: over the pack
		apply(t, s, 1, pt("m", "h=b", "value", 30, 3))                                // txn 4: a second pack
		flushNow(t, s)
	}
	want, err := without.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	got, err := withP.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, []SeriesPoint{{TS: 5, Value: 2}, {TS: 10, Value: 2}, {TS: 20, Value: 1}}, got[0].Points)

	for _, to := range []uint64{2, 0} {
		for _, s := range []Shard{withP, without} {
			require.NoError(t, s.TruncateAfter(to))
		}
		want, err := without.Query("m", nil, math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		got, err := withP.Query("m", nil, math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		require.Equal(t, want, got, "truncated after %d", to)
	}
	got, err = withP.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestPacksDelete: deletes of ranges and of whole series over packed points
// answer as over blocks, and a series left with points only in a pack is
// not gone.
func TestPacksDelete(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		for ts := int64(1); ts <= 12; ts += 3 {
			writeHosts(t, s, ts, ts+2) // 3 points per series per flush: packed
			flushNow(t, s)
		}
		del(t, s, 1, hostA(4, 8))
		flushNow(t, s)
		del(t, s, 1, wire.Delete{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "b"}}, Min: math.MinInt64, Max: math.MaxInt64})
		flushNow(t, s)
	}
	require.Equal(t, seen(t, without), seen(t, withP))
	require.Empty(t, filterHost(seen(t, withP), "b"))
	require.Equal(t, seriesKeys(t, without), seriesKeys(t, withP))
}

// TestPacksSnapshot: a snapshot of a shard holding packs, restored into
// another engine, answers the same.
func TestPacksSnapshot(t *testing.T) {
	_, s := openShard1(t, append(manual, withPacks())...)
	for i := range 4 {
		apply(t, s, 1, telegrafSystem(int64(i), i)...)
		flushNow(t, s)
	}
	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	_, dst := openShard1(t, manual...)
	require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))
	packs, _, _, format := packStats(t, dst)
	require.Equal(t, 4, packs)
	require.EqualValues(t, packFormat, format)
	for _, m := range []string{"system", "disk", "net"} {
		require.Equal(t, queryAll(t, s, m), queryAll(t, dst, m), m)
	}
}

// TestSnapshotRefusedToAnOlderPeer: a snapshot for a peer that reads only
// the format before packs is sent while the file holds none and refused,
// naming both formats and writing nothing, once a flush has packed; for a
// peer of this format it is sent.
func TestSnapshotRefusedToAnOlderPeer(t *testing.T) {
	_, s := openShard1(t, manual...)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1))
	flushNow(t, s)
	var snap bytes.Buffer
	require.NoError(t, s.(*boltShard).SnapshotUpTo(&snap, PackFormat-1))
	require.NotZero(t, snap.Len())

	s.(PackWriter).AllowPacks(true)
	apply(t, s, 1, pt("m", "h=a", "value", 2, 1))
	flushNow(t, s)
	snap.Reset()
	err := s.(*boltShard).SnapshotUpTo(&snap, PackFormat-1)
	require.ErrorIs(t, err, ErrFormatTooNew)
	require.ErrorContains(t, err, "is format 3, the peer reads format 2 and older")
	require.Zero(t, snap.Len(), "nothing written before the refusal")
	require.NoError(t, s.Snapshot(&snap))
	require.NotZero(t, snap.Len())
}

// TestPacksRandomAgainstModel is TestRandomAgainstModel with packs:
// overwrites, out-of-order points, truncations, compactions and reopens.
func TestPacksRandomAgainstModel(t *testing.T) {
	t.Run("overwrites", func(t *testing.T) {
		randomAgainstModel(t, func(rng *rand.Rand, _ int) int64 { return int64(rng.IntN(30)) }, withPacks())
	})
	t.Run("increasing", func(t *testing.T) {
		randomAgainstModel(t, func(rng *rand.Rand, step int) int64 {
			if rng.IntN(10) == 0 {
				return int64(step - rng.IntN(40))
			}
			return int64(step + rng.IntN(3))
		}, withPacks())
	})
}

// TestPacksRandomLayouts drives a shard with packs and one without through
// the same seeded mix of typed writes over many series, late points,
// deletes, flushes and compactions (of packs), and checks that they answer every query alike.
func TestPacksRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 3))
	withP, without := twoLayouts(t)
	types := []models.FieldType{models.FieldFloat, models.FieldInteger, models.FieldUnsigned, models.FieldBoolean, models.FieldString}
	for step := range 300 {
		var e Entry
		switch r := rng.IntN(30); {
		case r < 3:
			flushNow(t, withP)
			flushNow(t, without)
			continue
		case r == 4:
			require.NoError(t, withP.(Compacter).Compact())
			continue
		case r == 5:
			_, err := withP.(*boltShard).compactPacks(false)
			require.NoError(t, err)
			continue
		case r == 3:
			lo := int64(rng.IntN(5 * (step + 1)))
			d := wire.Delete{Metric: "m", Tags: []lineproto.Tag{{Key: "h", Value: fmt.Sprint(rng.IntN(20))}}, Min: lo, Max: lo + int64(rng.IntN(50))}
			e.Delete = &d
		default:
			for range rng.IntN(8) + 1 {
				h := rng.IntN(20)
				typ := types[h%len(types)]
				ts := int64(5*step + rng.IntN(5))
				if rng.IntN(60) == 0 {
					ts = int64(rng.IntN(5*step + 1)) // late: over flushed points
				}
				e.Points = append(e.Points, typed("m", fmt.Sprintf("h=%d", h), "f", ts, typ, rng.Uint64()%1000, fmt.Sprint("s", rng.IntN(9))))
			}
		}
		for _, s := range []Shard{withP, without} {
			e.TxnID, e.Term = s.LastTxnID()+1, 1
			require.NoError(t, s.Apply(e))
		}
		if step%25 == 24 {
			require.Equal(t, everything(t, without), everything(t, withP), "step %d", step)
		}
	}
	flushNow(t, withP)
	flushNow(t, without)
	require.Equal(t, everything(t, without), everything(t, withP))
	packs, packed, _, _ := packStats(t, withP)
	require.Positive(t, packs)
	t.Logf("%d packs hold %d series blocks", packs, packed)
}

// everything is every series of m, through Query, and through Scan as
// "key@ts=value".
func everything(t *testing.T, s Shard) any {
	t.Helper()
	got, err := s.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	var scanned []string
	require.NoError(t, s.(Scanner).Scan("m", nil, math.MinInt64, math.MaxInt64, func(string) bool { return true },
		func(key string, pts []SeriesPoint) error {
			for _, p := range pts {
				scanned = append(scanned, fmt.Sprintf("%s@%d=%v", key, p.TS, p))
			}
			return nil
		}))
	return []any{got, scanned}
}

// TestPacksManySeries: a flush of packManySeries series packs those with
// fewer than packManyPoints points, where a flush of fewer series gives
// them blocks of their own; a series with packManyPoints points keeps its
// block. Both layouts answer alike, before and after the packs' compaction.
func TestPacksManySeries(t *testing.T) {
	withP, without := twoLayouts(t)
	write := func(s Shard, series int, from, to int64) {
		writeSeries(t, s, series, from, to, func(ts int64) float64 { return float64(ts) })
	}
	for _, s := range []Shard{withP, without} {
		write(s, 100, 0, packPoints+2) // few series: blocks
		flushNow(t, s)
	}
	packs, _, blocks, _ := packStats(t, withP)
	require.Zero(t, packs)
	require.Equal(t, 100, blocks)

	for _, s := range []Shard{withP, without} {
		write(s, packManySeries, packPoints+2, 2*packPoints+4) // as many points each, many series: packed
		for ts := range int64(packManyPoints) {
			apply(t, s, 1, pt("cpu", "host=big", "value", 100+ts, 1))
		}
		flushNow(t, s)
	}
	packs, packed, blocks, _ := packStats(t, withP)
	require.Positive(t, packs)
	require.Equal(t, packManySeries, packed)
	require.Equal(t, 101, blocks) // the first flush's and big's
	_, _, blocks, _ = packStats(t, without)
	require.Equal(t, 100+packManySeries+1, blocks)

	want, err := without.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Len(t, want, packManySeries+1)
	got, err := withP.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, want, got)

	for _, s := range []Shard{withP, without} { // compaction leaves the last flush's packs: one with none
		for ts := range int64(packPoints) {
			apply(t, s, 1, pt("cpu", "host=big", "value", 1000+ts, 1))
		}
		flushNow(t, s)
	}
	want, err = without.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	_, err = withP.(*boltShard).compactPacks(true)
	require.NoError(t, err)
	packs, _, _, _ = packStats(t, withP)
	require.Zero(t, packs)
	got, err = withP.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestPacksOverwriteRewritesEachPackOnce: a flush that overwrites points of
// every series of a pack (a resend of a batch already flushed) rewrites the
// pack once, not once per series taken out of it, and answers as the same
// writes over blocks; a second overwrite over the series' own blocks then
// touches no pack.
func TestPacksOverwriteRewritesEachPackOnce(t *testing.T) {
	withP, without := twoLayouts(t)
	write := func(s Shard, from, to int64, v float64) {
		writeSeries(t, s, packManySeries, from, to, func(int64) float64 { return v })
	}
	for _, s := range []Shard{withP, without} {
		write(s, 0, 2, 1)
		flushNow(t, s)
	}
	packs, packed, _, _ := packStats(t, withP)
	require.Positive(t, packs)
	require.Equal(t, packManySeries, packed)

	before := packRewrites.Load()
	for _, s := range []Shard{withP, without} {
		write(s, 1, 2, 2) // the second point of every series again, a new value
		flushNow(t, s)
	}
	require.LessOrEqual(t, packRewrites.Load()-before, uint64(packs), "packs rewritten for %d series taken out of %d packs", packManySeries, packs)
	left, _, _, _ := packStats(t, withP)
	require.Zero(t, left, "every series left its pack")

	want, err := without.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Len(t, want, packManySeries)
	got, err := withP.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, []SeriesPoint{{TS: 0, Value: 1}, {TS: 1, Value: 2}}, got[0].Points)

	before = packRewrites.Load()
	for _, s := range []Shard{withP, without} {
		write(s, 0, 1, 3)
		flushNow(t, s)
	}
	require.Equal(t, before, packRewrites.Load())
	want, err = without.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	got, err = withP.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestPacksQueryChecksEachPackOnce: a query over every series of a pack
// checks the pack's checksum once, not once per series read from it.
func TestPacksQueryChecksEachPackOnce(t *testing.T) {
	_, s := openShardAt(t, t.TempDir(), append(manual, withPacks())...)
	writeSeries(t, s, packManySeries, 1, 2, func(int64) float64 { return 1 })
	flushNow(t, s)
	packs, packed, _, _ := packStats(t, s)
	require.Equal(t, packManySeries, packed)

	before := packChecks.Load()
	got, err := s.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Len(t, got, packManySeries)
	require.LessOrEqual(t, packChecks.Load()-before, uint64(packs), "pack checksums for %d series in %d packs", packManySeries, packs)
}

// writeSeries applies one point of each of series cpu,host=hN per ts in
// [from, to), valued v(ts), in transactions of 5,000 points.
func writeSeries(t *testing.T, s Shard, series int, from, to int64, v func(ts int64) float64) {
	t.Helper()
	var pts []lineproto.Point
	for ts := from; ts < to; ts++ {
		for i := range series {
			pts = append(pts, pt("cpu", "host=h"+strconv.Itoa(i), "value", ts, v(ts)))
			if len(pts) == 5000 {
				apply(t, s, 1, pts...)
				pts = pts[:0]
			}
		}
	}
	if len(pts) > 0 {
		apply(t, s, 1, pts...)
	}
}
