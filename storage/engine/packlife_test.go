package engine

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// threeFlushes writes cpu at 1..3, 10..12 and 20..21, a flush each (a pack
// each with packs).
func threeFlushes(t *testing.T, s Shard) {
	for _, r := range [][2]int64{{1, 3}, {10, 12}, {20, 21}} {
		writeHosts(t, s, r[0], r[1])
		flushNow(t, s)
	}
}

// TestPacksExpire: expiry drops the packs whose points are all older than
// the cutoff, as it drops such blocks, and the oldest point moves with it;
// the last flush's pack stays for the torn-block check, as its blocks do,
// until expiry checks it.
func TestPacksExpire(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		threeFlushes(t, s)
	}
	n, _, err := withP.(Expirer).ExpireBefore(5)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the first pack's three series blocks")
	_, err = withP.Query("cpu", nil, 0, 100) // the heads of the dropped pack are gone
	require.NoError(t, err)
	require.Len(t, *packsOf0(t, withP), 2)
	_, _, err = without.(Expirer).ExpireBefore(5)
	require.NoError(t, err)
	require.Equal(t, seen(t, without), seen(t, withP))
	require.NotContains(t, seen(t, withP), "a/@1=1")
	for _, s := range []Shard{withP, without} {
		ts, ok, err := s.(Expirer).OldestBlock()
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 10, ts)
	}
	// Everything older than 30 (expiry checks the last flush's first).
	n, _, err = withP.(Expirer).ExpireBefore(30)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	packs, _, _, _ := packStats(t, withP)
	require.Zero(t, packs)
	require.Empty(t, seen(t, withP))
}

func packsOf0(t *testing.T, s Shard) *[]packHead {
	t.Helper()
	v, ok := packLists.Load(s.(*boltShard).db)
	require.True(t, ok)
	return v.(*packList).heads.Load()
}

// TestPacksCompaction: background compaction merges the packs into the
// series' blocks once there are packCompactCount, but the last flush's; a
// full compaction merges them all; every point stays, late points and
// overwrites included, and the series get a block per run.
func TestPacksCompaction(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		for i := range int64(packCompactCount + 2) {
			writeHosts(t, s, 10*i, 10*i+2)
			flushNow(t, s)
		}
		apply(t, s, 1, pt("cpu", "host=b", "value", 15, 100)) // late, between two packs
		flushNow(t, s)
		last := 10 * int64(packCompactCount+2) // after every pack
		writeHosts(t, s, last, last+1)
		flushNow(t, s)
	}
	want := seen(t, without)
	packs, _, blocks, _ := packStats(t, withP)
	require.Equal(t, packCompactCount+3, packs)
	require.Equal(t, 1, blocks, "the late point's merge")

	merged, err := withP.(*boltShard).compactPacks(false)
	require.NoError(t, err)
	require.Positive(t, merged)
	packs, _, blocks, _ = packStats(t, withP)
	require.Equal(t, 1, packs, "the last flush's pack waits")
	require.Equal(t, 3, blocks, "a block per series")
	require.Len(t, *packsOf0(t, withP), 1)
	require.Equal(t, want, seen(t, withP))

	merged, err = withP.(*boltShard).compactPacks(false)
	require.NoError(t, err)
	require.Zero(t, merged, "one pack is not many")

	require.NoError(t, withP.(Compacter).Compact())
	packs, _, _, _ = packStats(t, withP)
	require.Zero(t, packs)
	require.Equal(t, want, seen(t, withP))
	got, err := withP.Query("cpu", map[string]string{"host": "b"}, 15, 15)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 15, Value: 100}}, got[0].Points)
	_, err = withP.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
}

// TestTornPackRecoveredFromLog: the last flush's pack cut short (zeros
// after the cut, as a torn page leaves it) is found at open by checksum;
// the flush is undone and its points replay from the log, and flushing
// them again writes a good pack.
func TestTornPackRecoveredFromLog(t *testing.T) {
	dir := t.TempDir()
	opts := append(manual, withPacks())
	e, s := openShardAt(t, dir, opts...)
	writeHosts(t, s, 1, 3)
	flushNow(t, s)
	writeHosts(t, s, 4, 6)
	flushNow(t, s)
	want := seen(t, s)
	require.NoError(t, e.Close())

	path := filepath.Join(dir, "db1", "0.db")
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketRecent).Cursor().First()
		require.True(t, isPackRecent(k), "the last flush recorded its pack")
		b := tx.Bucket(bucketPacks)
		v := slices.Clone(b.Get(k[1:]))
		clear(v[len(v)/2:])
		return b.Put(k[1:], v)
	}))
	require.NoError(t, db.Close())

	e, s = openShardAt(t, dir, opts...)
	require.EqualValues(t, 3, flushedTxn(s), "the torn flush is undone")
	require.Equal(t, want, seen(t, s))
	flushNow(t, s)
	require.Equal(t, want, seen(t, s))
	packs, _, _, _ := packStats(t, s)
	require.Equal(t, 2, packs)
	require.NoError(t, e.Close())
}

// TestPacksBounded: with compaction off, a shard holds at most packMaxCount
// packs; past them flushes write blocks of their own, and every point
// stays.
func TestPacksBounded(t *testing.T) {
	withP, without := twoLayouts(t)
	for _, s := range []Shard{withP, without} {
		for ts := range int64(packMaxCount + 5) {
			writeHosts(t, s, ts, ts)
			flushNow(t, s)
		}
	}
	packs, _, blocks, _ := packStats(t, withP)
	require.Equal(t, packMaxCount, packs)
	require.Equal(t, 5*3, blocks)
	require.Equal(t, seen(t, without), seen(t, withP))
}
