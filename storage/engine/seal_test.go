package engine

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

const hourNS = int64(time.Hour)

// writeHours writes cpu host=a and host=b (value, and idle for a) every 10 s
// of [0, hours h), many points to an entry, and flushes once: a series'
// blocks then straddle the hours.
func writeHours(t testing.TB, s Shard, hours int64) {
	t.Helper()
	for ts := int64(0); ts < hours*hourNS; {
		var batch []lineproto.Point
		for range 360 {
			batch = append(batch, pt("cpu", "host=a", "value", ts, float64(ts)), pt("cpu", "host=a", "idle", ts, 1),
				pt("cpu", "host=b", "value", ts, float64(ts)))
			ts += 10e9
		}
		apply(t, s, 1, batch...)
	}
	flushNow(t, s)
}

// partFilesOf lists the sealed partition files next to s's file.
func partFilesOf(t testing.TB, s Shard) map[uint64]string {
	t.Helper()
	files, err := partFiles(s.(*boltShard).path)
	require.NoError(t, err)
	return files
}

func partRecs(t testing.TB, s Shard) []partRec {
	t.Helper()
	var recs []partRec
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) (err error) { recs, err = readParts(tx); return err }))
	return recs
}

// sealAt seals s with 1 h partitions as of now and returns how many.
func sealAt(t testing.TB, s Shard, now int64) int {
	t.Helper()
	s.(Sealer).SetPartitionLength(time.Hour)
	n, err := s.(Sealer).Seal(now)
	require.NoError(t, err)
	return n
}

// TestSealMovesOldPartitionsToFiles: six hours of points, sealed as of 6 h
// with 1 h partitions: hours 0-4 go to files of their own (hour 5 ends less
// than a length before now), reads answer exactly what they did, a read
// outside a partition does not open it, the file is marked PartFormat, and
// all of it survives a reopen.
func TestSealMovesOldPartitionsToFiles(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	writeHours(t, s, 6)
	want := seen(t, s)
	lo, hi, ok, err := s.(Bounder).Bounds("cpu", nil, func(string) bool { return true })
	require.NoError(t, err)
	require.True(t, ok)
	blocksBefore := countBlocks(t, s)

	require.Zero(t, sealAt(t, s, 2*hourNS-1), "no partition ends a length before now")
	require.Equal(t, 5, sealAt(t, s, 6*hourNS))
	require.Zero(t, sealAt(t, s, 6*hourNS), "nothing left to seal")
	recs := partRecs(t, s)
	require.Len(t, recs, 5)
	for i, r := range recs {
		require.Equal(t, int64(i)*hourNS, r.start)
		require.Equal(t, r.start+hourNS, r.end)
		require.Equal(t, r.start, r.minTS)
		require.Equal(t, r.end-10e9, r.maxTS)
	}
	require.Len(t, partFilesOf(t, s), 5)
	require.Less(t, countBlocks(t, s), blocksBefore, "the shard file keeps hour 5 only")
	f, err := s.(PackWriter).Format()
	require.NoError(t, err)
	require.EqualValues(t, PartFormat, f)

	require.Equal(t, want, seen(t, s))
	lo2, hi2, ok, err := s.(Bounder).Bounds("cpu", nil, func(string) bool { return true })
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, [2]int64{lo, hi}, [2]int64{lo2, hi2})
	oldest, ok, err := s.(Expirer).OldestBlock()
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, oldest)

	opened := SealedReads()
	got, err := s.Query("cpu", nil, 5*hourNS, 6*hourNS)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 360)
	require.Equal(t, opened, SealedReads(), "a read of hour 5 opens no partition")
	got, err = s.Query("cpu", map[string]string{"host": "b"}, 2*hourNS+hourNS/2, 2*hourNS+hourNS/2+100e9)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 11)
	require.Equal(t, opened+1, SealedReads(), "a read inside hour 2 opens its partition only")

	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	require.Equal(t, want, seen(t, s))
	require.Len(t, partRecs(t, s), 5)
}

// TestSealLateWritesDeleteAndRollback: a late write into a sealed range
// lands in the shard file and wins on its ts; a rollback of it shows the
// sealed point again; the next seal merges it into a new file of the
// partition; a delete brings the partitions it touches back into the shard
// file (their files go) and removes its points; the entries flushed before
// a seal are not rolled back one by one.
func TestSealLateWritesDeleteAndRollback(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHours(t, s, 6)
	sealed := s.LastTxnID()
	require.Equal(t, 5, sealAt(t, s, 6*hourNS))
	want := seen(t, s)

	// Overwrite host=b at 30 min, and add a point at 30 min + 1 s.
	beforeLate := s.LastTxnID()
	apply(t, s, 1, pt("cpu", "host=b", "value", hourNS/2, -1), pt("cpu", "host=b", "value", hourNS/2+1e9, -2))
	flushNow(t, s)
	got, err := s.Query("cpu", map[string]string{"host": "b"}, hourNS/2, hourNS/2+1e9)
	require.NoError(t, err)
	require.Equal(t, []float64{-1, -2}, values(got[0].Points))

	require.NoError(t, s.TruncateAfter(beforeLate)) // the late write goes
	require.Equal(t, want, seen(t, s), "the sealed point shows again")
	err = s.TruncateAfter(sealed - 1)
	require.ErrorIs(t, err, ErrCompacted, "entries flushed before the seal")

	apply(t, s, 1, pt("cpu", "host=b", "value", hourNS/2, -1))
	flushNow(t, s)
	before := partRecs(t, s)[0]
	require.Equal(t, 1, sealAt(t, s, 6*hourNS), "hour 0 sealed again with its late write")
	after := partRecs(t, s)[0]
	require.NotEqual(t, before.fileID, after.fileID)
	require.NotContains(t, partFilesOf(t, s), before.fileID, "the replaced file is gone")
	got, err = s.Query("cpu", map[string]string{"host": "b"}, hourNS/2, hourNS/2)
	require.NoError(t, err)
	require.Equal(t, []float64{-1}, values(got[0].Points))

	// A delete of host=a over [1.5 h, 2.5 h]: hours 1 and 2 come back.
	recs := partRecs(t, s)
	del(t, s, 1, hostA(hourNS+hourNS/2, 2*hourNS+hourNS/2))
	flushNow(t, s)
	files := partFilesOf(t, s)
	require.Len(t, files, 3)
	require.NotContains(t, files, recs[1].fileID)
	require.NotContains(t, files, recs[2].fileID)
	got, err = s.Query("cpu", map[string]string{"host": "a", FieldTag: "value"}, 0, 6*hourNS)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 6*360-361)
	got, err = s.Query("cpu", map[string]string{"host": "b"}, 0, 6*hourNS)
	require.NoError(t, err)
	require.Equal(t, 6*360, len(got[0].Points), "host b keeps every point")
	require.Equal(t, 2, sealAt(t, s, 6*hourNS), "hours 1 and 2 sealed again")
	got2, err := s.Query("cpu", map[string]string{"host": "b"}, 0, 6*hourNS)
	require.NoError(t, err)
	require.Equal(t, got, got2)

	// DROP MEASUREMENT of a measurement the partitions do not hold brings
	// none of them back.
	apply(t, s, 1, pt("mem", "host=a", "value", 5*hourNS+1, 1))
	flushNow(t, s)
	files = partFilesOf(t, s)
	del(t, s, 1, wire.Delete{Metric: "mem", Min: math.MinInt64, Max: math.MaxInt64})
	flushNow(t, s)
	require.Equal(t, files, partFilesOf(t, s))
	mem, err := s.Query("mem", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Empty(t, mem)
}

func values(pts []SeriesPoint) []float64 {
	out := make([]float64, len(pts))
	for i, p := range pts {
		out[i] = p.Value
	}
	return out
}

// TestExpireDropsSealedFiles: an expiry drops the sealed partitions wholly
// older than the cutoff by removing their records and files (no rewrite of
// the shard file), and reads answer from the cutoff on.
func TestExpireDropsSealedFiles(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHours(t, s, 6)
	require.Equal(t, 5, sealAt(t, s, 6*hourNS))
	recs := partRecs(t, s)
	var size, blocks int64
	for _, r := range recs[:3] {
		size, blocks = size+r.size, blocks+r.blocks
	}
	shardFile := fileSize(t, s)

	n, bytes, err := s.(Expirer).ExpireBefore(3 * hourNS)
	require.NoError(t, err)
	require.EqualValues(t, blocks, n)
	require.Equal(t, size, bytes)
	files := partFilesOf(t, s)
	require.Len(t, files, 2)
	for _, r := range recs[:3] {
		require.NotContains(t, files, r.fileID)
	}
	require.Equal(t, shardFile, fileSize(t, s), "the shard file is not rewritten")
	got, err := s.Query("cpu", nil, 0, 6*hourNS)
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, 3*hourNS, got[0].Points[0].TS)
	require.Len(t, got[0].Points, 3*360)
	oldest, ok, err := s.(Expirer).OldestBlock()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3*hourNS, oldest)
}

// TestSealedFilesAtOpen: a partition file no record names (a seal cut
// short between its file and its commit) is removed at open; a recorded
// file missing or of another size fails the open, naming it; dropping the
// shard removes its partition files.
func TestSealedFilesAtOpen(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	writeHours(t, s, 4)
	require.Equal(t, 3, sealAt(t, s, 4*hourNS))
	path := s.(*boltShard).path
	stray := partPath(path, 0xabc)
	require.NoError(t, os.WriteFile(stray, []byte("a seal cut short"), 0o600))
	recs := partRecs(t, s)
	require.NoError(t, e.Close())

	e, s = openShardAt(t, dir, manual...)
	require.NoFileExists(t, stray)
	require.Len(t, partFilesOf(t, s), 3)
	require.NoError(t, e.Close())

	victim := partPath(path, recs[1].fileID)
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(victim, data[:len(data)/2], 0o600))
	e = newEngine(t, dir, manual...)
	_, err = e.Open("db1", 0)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, filepath.Base(victim))
	require.NoError(t, os.Remove(victim))
	_, err = e.Open("db1", 0)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "sealed partition")
	require.NoError(t, os.WriteFile(victim, data, 0o600))
	s, err = e.Open("db1", 0)
	require.NoError(t, err)
	require.Len(t, seen(t, s), 4*360*3)

	require.NoError(t, e.Drop("db1", 0))
	require.Empty(t, partFilesOf(t, s))
}

// TestBadPartitionRecordsRefused: a shard file whose parts bucket holds a
// record that cannot be (an empty range, points outside it, two
// overlapping partitions) does not open, and says why.
func TestBadPartitionRecordsRefused(t *testing.T) {
	for name, edit := range map[string]func(b *bolt.Bucket, recs []partRec) error{
		"empty range": func(b *bolt.Bucket, recs []partRec) error {
			r := recs[0]
			r.end = r.start
			return b.Put(tsKey(r.start), encodePart(r))
		},
		"points outside": func(b *bolt.Bucket, recs []partRec) error {
			r := recs[0]
			r.maxTS = r.end
			return b.Put(tsKey(r.start), encodePart(r))
		},
		"overlapping": func(b *bolt.Bucket, recs []partRec) error {
			r := recs[1]
			r.start, r.minTS = recs[0].start+1, recs[0].start+1
			return b.Put(tsKey(r.start), encodePart(r))
		},
		"short value": func(b *bolt.Bucket, recs []partRec) error {
			return b.Put(tsKey(recs[0].start), []byte{1, 2, 3})
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			e, s := openShardAt(t, dir, manual...)
			writeHours(t, s, 4)
			require.Equal(t, 3, sealAt(t, s, 4*hourNS))
			recs, path := partRecs(t, s), s.(*boltShard).path
			require.NoError(t, e.Close())
			db, err := bolt.Open(path, 0o600, nil)
			require.NoError(t, err)
			require.NoError(t, db.Update(func(tx *bolt.Tx) error { return edit(tx.Bucket(bucketParts), recs) }))
			require.NoError(t, db.Close())
			_, err = newEngine(t, dir, manual...).Open("db1", 0)
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, "partition")
		})
	}
}

// TestSnapshotCarriesSealedPartitions: a snapshot of a sealed shard carries
// its partition files and a restore installs them (the target's own go);
// a peer that reads format 3 at most is refused one.
func TestSnapshotCarriesSealedPartitions(t *testing.T) {
	e, src := openShard1(t, manual...)
	writeHours(t, src, 5)
	require.Equal(t, 4, sealAt(t, src, 5*hourNS))
	want := seen(t, src)

	var snap bytes.Buffer
	require.ErrorIs(t, src.(*boltShard).SnapshotUpTo(&snap, PackFormat), ErrFormatTooNew)
	snap.Reset()
	require.NoError(t, src.Snapshot(&snap))

	dst, err := e.Open("db2", 3)
	require.NoError(t, err)
	writeHours(t, dst, 3)
	require.Equal(t, 2, sealAt(t, dst, 3*hourNS))
	own := partFilesOf(t, dst)
	require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))
	require.Equal(t, want, seen(t, dst))
	files := partFilesOf(t, dst)
	require.Len(t, files, 4)
	for _, r := range partRecs(t, src) {
		require.Contains(t, files, r.fileID)
	}
	for id := range own {
		require.NotContains(t, files, id, "the target's own partitions went")
	}

	// A snapshot whose partition file is cut short is refused whole.
	bad := bytes.Clone(snap.Bytes())
	bad = bad[:len(bad)-100]
	err = dst.Restore(bytes.NewReader(bad))
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.Equal(t, want, seen(t, dst))
	require.Len(t, partFilesOf(t, dst), 4)
	staged, err := filepath.Glob(dst.(*boltShard).path + ".restore*")
	require.NoError(t, err)
	require.Empty(t, staged)
}

// TestRollupsOverSealedPartitions: the rollup cells stay equal to the
// aggregates of the raw points when those are in sealed partitions: after
// a seal, a late write over a sealed point (its cell recomputed from the
// partition and the shard file), its rollback, a delete that brings
// partitions back, and a level added later, filled from sealed points.
func TestRollupsOverSealedPartitions(t *testing.T) {
	_, s := openShard1(t, manual...)
	r := s.(Rollups)
	require.NoError(t, r.SetRollups([]time.Duration{time.Minute, time.Hour}))
	writeHours(t, s, 6)
	rolled := func(msg string, ivs ...time.Duration) {
		t.Helper()
		for _, iv := range ivs {
			require.Equal(t, rawCells(t, s, "cpu", int64(iv), math.MinInt64, math.MaxInt64),
				storedCells(t, s, "cpu", int64(iv), math.MinInt64, math.MaxInt64), "%s: level %s", msg, iv)
		}
	}
	rolled("written", time.Minute, time.Hour)
	require.Equal(t, 5, sealAt(t, s, 6*hourNS))
	rolled("sealed", time.Minute, time.Hour)

	before := s.LastTxnID()
	apply(t, s, 1, pt("cpu", "host=b", "value", hourNS/2, -1e9), pt("cpu", "host=a", "value", hourNS+5e9, 7))
	flushNow(t, s)
	rolled("late writes into sealed hours", time.Minute, time.Hour)
	require.NoError(t, s.TruncateAfter(before))
	rolled("rolled back", time.Minute, time.Hour)

	del(t, s, 1, hostA(2*hourNS, 3*hourNS))
	flushNow(t, s)
	rolled("deleted", time.Minute, time.Hour)
	require.Equal(t, 2, sealAt(t, s, 6*hourNS), "hours 2 and 3 (its first point is the delete's last ts) sealed again")
	require.Len(t, partRecs(t, s), 5)
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		// Host a's series hold no point of hour 2 any more; host b's, after
		// them, went to the file all the same.
		oldest, _, err := fileOldest(tx)
		require.Equal(t, 5*hourNS, oldest, "the shard file keeps hour 5 only")
		return err
	}))
	rolled("sealed again", time.Minute, time.Hour)

	require.NoError(t, r.SetRollups([]time.Duration{time.Minute, 10 * time.Minute, time.Hour}))
	for more := true; more; {
		var err error
		more, err = r.FillRollups()
		require.NoError(t, err)
	}
	rolled("a level filled from sealed points", 10*time.Minute)
}

// TestSealAfterLengthChange: partitions sealed with one length stay; the
// next seals with another fit between them, and a late write into an old
// partition joins it again, so sealing never stops at an old range.
func TestSealAfterLengthChange(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHours(t, s, 8)
	require.Equal(t, 3, sealAt(t, s, 4*hourNS), "hours 0-2, 1 h each")
	want := seen(t, s)
	s.(Sealer).SetPartitionLength(2 * time.Hour)
	n, err := s.(Sealer).Seal(12 * hourNS)
	require.NoError(t, err)
	require.Equal(t, 3, n, "hour 3 alone (up to the next 2 h boundary), then hours 4-5 and 6-7")
	apply(t, s, 1, pt("cpu", "host=b", "value", hourNS+hourNS/2, -1))
	flushNow(t, s)
	n, err = s.(Sealer).Seal(12 * hourNS)
	require.NoError(t, err)
	require.Equal(t, 1, n, "hour 1 again, with its late point")
	var ranges [][2]int64
	for _, r := range partRecs(t, s) {
		ranges = append(ranges, [2]int64{r.start / hourNS, r.end / hourNS})
	}
	require.Equal(t, [][2]int64{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 6}, {6, 8}}, ranges)
	got := seen(t, s)
	require.Len(t, got, len(want))
	require.Contains(t, got, fmt.Sprintf("b/@%d=-1", hourNS+hourNS/2))
}

// TestSealGivesUpOnAFlushIntoItsRange: a flush that writes into the range
// while its file is written makes the seal give up (its file goes); the
// next seal takes the late point too; a flush of newer points does not.
func TestSealGivesUpOnAFlushIntoItsRange(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHours(t, s, 3)
	bs := s.(*boltShard)
	bs.sealHook = func() {
		apply(t, s, 1, pt("cpu", "host=b", "value", hourNS/2, -1), pt("cpu", "host=b", "value", hourNS/2+1, -2))
		flushNow(t, s)
	}
	require.Zero(t, sealAt(t, s, 3*hourNS))
	require.Empty(t, partFilesOf(t, s), "the given up file is gone")
	bs.sealHook = func() {
		apply(t, s, 1, pt("cpu", "host=b", "value", 3*hourNS, 1))
		flushNow(t, s)
	}
	require.Equal(t, 2, sealAt(t, s, 3*hourNS), "hours 0 and 1: a flush of points after them changes nothing")
	got, err := s.Query("cpu", map[string]string{"host": "b"}, hourNS/2, hourNS/2+1)
	require.NoError(t, err)
	require.Equal(t, []float64{-1, -2}, values(got[0].Points))
	require.NoError(t, bs.view(func(tx *bolt.Tx) error {
		oldest, _, err := fileOldest(tx)
		require.Equal(t, 2*hourNS, oldest, "the late points went to the partition file")
		return err
	}))
}

// TestSealPacedInSteps: a seal reads the shard file in steps of at most
// sealBatch series, one read transaction each, and books each step's work
// (16 bytes a point) with the engine's compaction limiter (so it waits as compaction does);
// a flush into the range between two steps makes it give up, and the next
// seal takes the late point too.
func TestSealPacedInSteps(t *testing.T) {
	const rate = 64 << 20
	_, s := openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(rate))
	bs := s.(*boltShard)
	series := sealBatch + 100
	batch := make([]lineproto.Point, 0, series+1)
	for i := range series {
		batch = append(batch, pt("cpu", fmt.Sprintf("host=h%d", i), "value", hourNS/2, float64(i)))
	}
	apply(t, s, 1, append(batch, pt("cpu", "host=h0", "value", 3*hourNS, 1))...)
	flushNow(t, s)

	steps := 0
	bs.sealStep = func(int64) {
		if steps++; steps == 1 {
			apply(t, s, 1, pt("cpu", "host=h1", "value", hourNS/2+1, -1))
			flushNow(t, s)
		}
	}
	require.Zero(t, sealAt(t, s, 3*hourNS), "a flush into the range between steps")
	require.Equal(t, 2, steps)
	require.Empty(t, partFilesOf(t, s), "the given up file is gone")

	var work []int64
	bs.sealStep = func(n int64) { work = append(work, n) }
	before := time.Now()
	require.Equal(t, 1, sealAt(t, s, 3*hourNS))
	require.Len(t, work, 2, "%d series: two steps", series)
	require.Equal(t, []int64{pointWork * (sealBatch + 1), pointWork * 100}, work, "a point a series, and h1's late one")
	total := work[0] + work[1]
	bs.sealPace.mu.Lock()
	booked := bs.sealPace.next.Sub(before)
	bs.sealPace.mu.Unlock()
	require.GreaterOrEqual(t, booked, time.Duration(float64(total)/rate*float64(time.Second)),
		"the limiter paces the %d bytes of work of the steps", total)

	got, err := s.Query("cpu", nil, 0, hourNS)
	require.NoError(t, err)
	require.Len(t, got, series)
	require.NoError(t, bs.view(func(tx *bolt.Tx) error {
		oldest, _, err := fileOldest(tx)
		require.Equal(t, 3*hourNS, oldest, "hour 0, the late point too, went to the partition file")
		return err
	}))
}
