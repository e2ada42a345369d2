package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// tornFixture writes two flushes to a shard file and returns the file, the
// key of one block written by the second (last) flush, and what every query
// must answer.
func tornFixture(t *testing.T, dir string) (path string, key []byte, want []Series) {
	e, s := openShardAt(t, dir, manual...)
	for i := range 40 {
		apply(t, s, 1, pt("m", "h=a", "value", int64(i)*10, float64(i)), pt("m", "h=b", "value", int64(i)*10, float64(i%3)))
	}
	flushNow(t, s)
	for i := 40; i < 80; i++ {
		apply(t, s, 1, pt("m", "h=a", "value", int64(i)*10, float64(i)), pt("m", "h=b", "value", int64(i)*10, float64(i%3)))
	}
	flushNow(t, s)
	want, err := s.Query("m", nil, 0, 1000)
	require.NoError(t, err)
	require.Len(t, want, 2)
	require.Len(t, want[0].Points, 80)
	require.NoError(t, e.Close())

	path = filepath.Join(dir, "db1", "0.db")
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketRecent).Cursor().First()
		key = slices.Clone(k)
		return nil
	}))
	require.NoError(t, db.Close())
	require.NotNil(t, key, "the last flush recorded its blocks")
	return path, key, want
}

func setBlock(t *testing.T, path string, key, val []byte) {
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBlocks).Put(key, val) }))
	require.NoError(t, db.Close())
}

func getBlock(t *testing.T, path string, key []byte) []byte {
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	var v []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		v = slices.Clone(tx.Bucket(bucketBlocks).Get(key))
		return nil
	}))
	return v
}

// TestTornBlockAtEveryOffsetRecoveredFromLog writes the last flush's block
// cut short at every byte offset (and, as a torn page would leave it, with
// zeros after the cut): each reopen detects it by checksum, undoes that flush
// and rebuilds the points from the log, and a new flush writes a good block.
func TestTornBlockAtEveryOffsetRecoveredFromLog(t *testing.T) {
	golden := t.TempDir()
	path, key, want := tornFixture(t, golden)
	good := getBlock(t, path, key)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	for k := 0; k < len(good); k++ {
		for _, torn := range [][]byte{good[:k], append(slices.Clone(good[:k]), make([]byte, len(good)-k)...)} {
			if slices.Equal(torn, good) {
				continue
			}
			dir := t.TempDir()
			p := filepath.Join(dir, "db1", "0.db")
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o750))
			require.NoError(t, os.WriteFile(p, orig, 0o600))
			copyLog(t, golden, dir)
			setBlock(t, p, key, torn)

			e := newEngine(t, dir, manual...)
			s, err := e.Open("db1", 0)
			require.NoError(t, err, "offset %d", k)
			require.EqualValues(t, 40, flushedTxn(s), "offset %d: the torn flush is undone", k)
			got, err := s.Query("m", nil, 0, 1000)
			require.NoError(t, err, "offset %d", k)
			require.Equal(t, want, got, "offset %d", k)
			flushNow(t, s)
			got, err = s.Query("m", nil, 0, 1000)
			require.NoError(t, err)
			require.Equal(t, want, got, "offset %d, flushed again", k)
			require.NoError(t, e.Close())
		}
	}
}

// TestCorruptOlderBlockIsAnError: a block that cannot be rebuilt from the
// log (written by an earlier flush) fails reads loudly instead of answering
// wrong points.
func TestCorruptOlderBlockIsAnError(t *testing.T) {
	dir := t.TempDir()
	path, _, _ := tornFixture(t, dir)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	var first []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketBlocks).Cursor().First()
		first = slices.Clone(k)
		require.Nil(t, tx.Bucket(bucketRecent).Get(k), "written by the first flush")
		require.NotEmpty(t, v)
		return nil
	}))
	require.NoError(t, db.Close())
	good := getBlock(t, path, first)
	bad := slices.Clone(good)
	bad[len(bad)-1] ^= 0x10
	setBlock(t, path, first, bad)

	s, err := newEngine(t, dir, manual...).Open("db1", 0)
	require.NoError(t, err)
	_, err = s.Query("m", nil, 0, 1000)
	require.ErrorIs(t, err, ErrBlockCorrupt)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestQueryReadsOnlyOverlappingBlocks counts block decodes: a narrow range
// over a long series reads one block, not all of them.
func TestQueryReadsOnlyOverlappingBlocks(t *testing.T) {
	_, s := openShard1(t, manual...)
	for b := range 5 {
		for i := range maxBlockPoints {
			ts := int64(b*maxBlockPoints+i) * 10
			apply(t, s, 1, pt("m", "h=a", "value", ts, float64(i)))
		}
		flushNow(t, s)
	}
	before := blockReads.Load()
	got, err := s.Query("m", nil, int64(2*maxBlockPoints+5)*10, int64(2*maxBlockPoints+9)*10)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 5)
	require.EqualValues(t, 1, blockReads.Load()-before)
}

func countBlocks(t *testing.T, s Shard) (n int) {
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketBlocks).Stats().KeyN
		return nil
	}))
	return n
}

// TestCompactMergesSmallBlocks: one small block per series per flush becomes
// one block per series, the answers do not change, and a truncation across
// the merged blocks still undoes exactly the cut entries.
func TestCompactMergesSmallBlocks(t *testing.T) {
	_, s := openShard1(t, manual...)
	for f := range 10 {
		for i := range 5 {
			ts := int64(f*5+i) * 10
			apply(t, s, 1, pt("m", "h=a", "value", ts, float64(ts)), pt("m", "h=b", "value", ts, 1), pt("n", "", "value", ts, -1))
		}
		flushNow(t, s)
	}
	require.Equal(t, 30, countBlocks(t, s))
	apply(t, s, 1, pt("m", "h=a", "value", 100, 7)) // overwrites a flushed point
	flushNow(t, s)
	want, err := s.Query("m", nil, 0, 1000)
	require.NoError(t, err)
	require.NoError(t, s.(Compacter).Compact())
	require.Equal(t, 3, countBlocks(t, s))
	got, err := s.Query("m", nil, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, want, got)

	require.NoError(t, s.TruncateAfter(s.LastTxnID()-1))
	got, err = s.Query("m", map[string]string{"h": "a"}, 100, 100)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 100, Value: 100}}, got[0].Points)
}

// TestBackgroundCompaction: with the background pass on, small blocks get
// merged without anyone asking.
func TestBackgroundCompaction(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(1<<30))
	for f := range 8 {
		for i := range 3 {
			apply(t, s, 1, pt("m", "h=a", "value", int64(f*3+i)*10, 1))
		}
		flushNow(t, s)
	}
	require.Eventually(t, func() bool { return countBlocks(t, s) <= 2 }, 20*time.Second, 20*time.Millisecond)
	got, err := s.Query("m", nil, 0, 1000)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 24)
}

// TestIndexListsFlushedAndMemtableSeries: the query index answers from the
// posting lists and the memtable together.
func TestIndexListsFlushedAndMemtableSeries(t *testing.T) {
	_, s := openShard1(t, manual...)
	apply(t, s, 1, pt("cpu", "host=a,region=eu", "usage", 1, 1), pt("cpu", "host=b,region=us", "idle", 1, 1), pt("mem", "host=a", "value", 1, 1))
	flushNow(t, s)
	apply(t, s, 1, pt("cpu", "dc=x,host=c", "usage", 2, 1), pt("disk", "", "value", 2, 1))
	ix := s.(Index)
	ms, err := ix.Measurements()
	require.NoError(t, err)
	require.Equal(t, []string{"cpu", "disk", "mem"}, ms)
	keys, err := ix.TagKeys("cpu")
	require.NoError(t, err)
	require.Equal(t, []string{"dc", "host", "region"}, keys)
	vals, err := ix.TagValues("cpu", "host")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, vals)
	fields, err := ix.FieldKeys("cpu")
	require.NoError(t, err)
	require.Equal(t, []string{"idle", "usage"}, fields)
	vals, err = ix.TagValues("mem", "region")
	require.NoError(t, err)
	require.Empty(t, vals)
	got, err := s.Query("cpu", map[string]string{"region": "us", FieldTag: "idle"}, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "b", got[0].Tags["host"])
}

// TestOpenConvertsPerPointFiles: a shard file of the per-point layout
// (series buckets of ts -> value) opens with its points in blocks, indexed,
// and its old buckets gone.
func TestOpenConvertsPerPointFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db1", "0.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o750))
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	e := Entry{TxnID: 1, Term: 3, Points: []lineproto.Point{pt("cpu", "host=a", "value", 5, 2)}}
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketLog, bucketUndo, bucketSeries} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		if err := writeMeta(tx, shardMeta{lastTxn: 1, lastTerm: 3, flushedTxn: 1}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketLog).Put(u64Key(1), e.appendBinary(nil)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketUndo).Put(u64Key(1), appendUndo(nil, undoOp{point: 0})); err != nil {
			return err
		}
		b, err := tx.Bucket(bucketSeries).CreateBucket([]byte(lineproto.AppendSeriesKey(nil, "cpu", e.Points[0].Tags, "value")))
		if err != nil {
			return err
		}
		for _, p := range []memPoint{{-7, math.Float64bits(1)}, {5, math.Float64bits(2)}} {
			k := make([]byte, 8)
			putTSKey(k, p.ts)
			if err := b.Put(k, binary.BigEndian.AppendUint64(nil, p.bits)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())

	s, err := newEngine(t, dir, manual...).Open("db1", 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.LastTxnID())
	got, err := s.Query("cpu", map[string]string{"host": "a"}, -100, 100)
	require.NoError(t, err)
	require.Equal(t, []Series{{Metric: "cpu", Tags: map[string]string{"host": "a"}, Points: []SeriesPoint{{TS: -7, Value: 1}, {TS: 5, Value: 2}}}}, got)
	require.Equal(t, 1, countBlocks(t, s))
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(bucketSeries))
		return nil
	}))
	// The converted entry can still be cut: its undo record is intact.
	require.NoError(t, s.TruncateAfter(0))
	got, err = s.Query("cpu", nil, -100, 100)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: -7, Value: 1}}, got[0].Points)
}

// TestDropRemovesEveryFile: dropping a compacted shard leaves no file of it,
// staging files of an interrupted restore or compaction included.
func TestDropRemovesEveryFile(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir, manual...)
	s, err := e.Open("db1", 3)
	require.NoError(t, err)
	apply(t, s, 1, pt("m", "", "value", 1, 1))
	require.NoError(t, s.(Compacter).Compact())
	path := filepath.Join(dir, "db1", "3.db")
	for _, stray := range []string{path + ".restore", path + ".compact"} {
		require.NoError(t, os.WriteFile(stray, []byte("x"), 0o600))
	}
	require.NoError(t, e.Drop("db1", 3))
	left, err := os.ReadDir(filepath.Join(dir, "db1"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// copyLog copies the engine's write-ahead log from one data dir to another.
func copyLog(t *testing.T, from, to string) {
	t.Helper()
	src, dst := filepath.Join(from, walDirName), filepath.Join(to, walDirName)
	require.NoError(t, os.MkdirAll(dst, 0o750))
	des, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600))
	}
}

// TestSeriesIDsAcrossFlushesAndReopen: a flush reads the next series id once
// and writes it back once; series created by later flushes, before and after
// a reopen, get ids of their own, and their posting lists find them all.
func TestSeriesIDsAcrossFlushesAndReopen(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	apply(t, s, 1, pt("cpu", "host=a", "usage", 1, 1), pt("cpu", "host=b", "usage", 1, 2))
	flushNow(t, s)
	apply(t, s, 1, pt("cpu", "host=c", "usage", 2, 3), pt("cpu", "host=a", "usage", 2, 4))
	flushNow(t, s)
	flushNow(t, s) // an empty flush creates nothing
	require.NoError(t, s.Close())
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	apply(t, s, 1, pt("cpu", "host=d", "usage", 3, 5), pt("cpu", "host=b", "usage", 3, 6))
	flushNow(t, s)

	ids := map[string]uint64{}
	var next []byte
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		next = slices.Clone(tx.Bucket(bucketMeta).Get(keyNextSID))
		return tx.Bucket(bucketSKey).ForEach(func(k, v []byte) error {
			ids[string(v)] = beUint64(k)
			return nil
		})
	}))
	require.Equal(t, u64Key(5), next, "four series, ids 1-4")
	require.Equal(t, map[string]uint64{"cpu,host=a#usage": 1, "cpu,host=b#usage": 2, "cpu,host=c#usage": 3, "cpu,host=d#usage": 4}, ids)
	vals, err := s.(Index).TagValues("cpu", "host")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d"}, vals)
	for host, want := range map[string][]SeriesPoint{"a": {{TS: 1, Value: 1}, {TS: 2, Value: 4}}, "b": {{TS: 1, Value: 2}, {TS: 3, Value: 6}}, "c": {{TS: 2, Value: 3}}, "d": {{TS: 3, Value: 5}}} {
		got, err := s.Query("cpu", map[string]string{"host": host}, 0, 10)
		require.NoError(t, err)
		require.Len(t, got, 1, host)
		require.Equal(t, want, got[0].Points, host)
	}
}

// TestSeriesBlocksFromEveryPosition: seriesBlocks gives the blocks of a
// series that may hold points at or after ts, in order, wherever its seek
// lands: before the bucket's first key, between two series, inside a
// series' blocks, past the last key; checked against a walk of the whole
// bucket.
func TestSeriesBlocksFromEveryPosition(t *testing.T) {
	_, s := openShard1(t, manual...)
	for flush := range int64(3) {
		for _, h := range []string{"a", "b", "c"} {
			apply(t, s, 1, pt("m", "h="+h, "v", 10*flush, 1), pt("m", "h="+h, "v", 10*flush+5, 2))
		}
		flushNow(t, s)
	}
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBlocks)
		type blk struct {
			id         uint64
			minTS, max int64
		}
		var all []blk
		require.NoError(t, b.ForEach(func(k, v []byte) error {
			h, _, err := parseBlock(v)
			all = append(all, blk{beUint64(k), h.minTS, h.maxTS})
			return err
		}))
		require.Len(t, all, 9)
		for id := uint64(0); id <= 4; id++ {
			for ts := int64(-1); ts <= 30; ts++ {
				var want, got []string
				for _, x := range all {
					if x.id == id && x.max >= ts {
						want = append(want, fmt.Sprint(x.minTS))
					}
				}
				require.NoError(t, seriesBlocks(b, id, ts, func(k, _ []byte, h blockHeader) (bool, error) {
					require.Equal(t, id, beUint64(k))
					got = append(got, fmt.Sprint(h.minTS))
					return true, nil
				}))
				require.Equal(t, want, got, "series %d from %d", id, ts)
			}
		}
		return nil
	}))
}

// The posting lists a flush of new series joins are read with one cursor
// stepping forward through the bucket: lists that exist (after gaps of
// keys the flush does not touch, short and long) get the new ids
// appended, new lists are made, and every series' id is in the list of
// each of its posting keys, in order, once.
func TestNewSeriesJoinPostingLists(t *testing.T) {
	_, s := openShard1(t, manual...)
	want := map[string][]uint64{}
	// Flushed first: hosts 0-299 in regions of 50; then hosts 0-599 every
	// 7th in regions of 100 (every one a new series; some of the lists
	// exist, others are new, and the gaps between them vary).
	var pts []lineproto.Point
	for h := range 300 {
		pts = append(pts, pt("cpu", fmt.Sprintf("host=h%d,region=r%d", h, h/50), "value", 10, 1))
	}
	apply(t, s, 1, pts...)
	flushNow(t, s)
	pts = pts[:0]
	for h := 0; h < 600; h += 7 {
		pts = append(pts, pt("cpu", fmt.Sprintf("host=h%d,region=r%d", h, h/100), "value", 20, 1))
		pts = append(pts, pt("mem", fmt.Sprintf("host=h%d", h), "free", 20, 1))
	}
	apply(t, s, 1, pts...)
	flushNow(t, s)

	bs := s.(*boltShard)
	require.NoError(t, bs.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSKey).ForEach(func(k, v []byte) error {
			metric, tags, field, err := lineproto.ParseSeriesKey(string(v))
			require.NoError(t, err)
			id := beUint64(k)
			add := func(pk []byte) { want[string(pk)] = append(want[string(pk)], id) }
			add(postingPrefix(postMetric, metric))
			add(postingPrefix(postField, metric, field))
			for _, tg := range tags {
				add(postingPrefix(postTag, metric, tg.Key, tg.Value))
			}
			return nil
		})
	}))
	r3 := want[string(postingPrefix(postTag, "cpu", "region", "r3"))]
	require.Len(t, r3, 50+15, "r3 of the first flush, and of the second")
	got := map[string][]uint64{}
	require.NoError(t, bs.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPost).ForEach(func(k, v []byte) error {
			ids, err := decodePostings(v)
			got[string(k)] = ids
			return err
		})
	}))
	require.Equal(t, want, got)
}
