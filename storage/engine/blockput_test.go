package engine

import (
	"encoding/binary"
	"fmt"
	"github.com/cairn-db/cairn/models"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// One blockPut writes the blocks of many series into shared value chunks;
// each must read back as written after the commit, including blocks that
// outgrow the room kept for them (random timestamps and values) and are
// allocated apart, and a series of several blocks.
func TestBlockPutManySeriesInOneTransaction(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	rng := rand.New(rand.NewPCG(7, 14))
	want := map[uint64][]memPoint{}
	for id := uint64(1); id <= 3000; id++ {
		n := 1 + rng.IntN(40)
		switch id % 500 {
		case 0:
			n = maxBlockPoints
		case 1:
			n = 3*maxBlockPoints + 17
		}
		want[id] = jitteredSeries(rng, n)
	}
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		bp := newBlockPut(tx, 42)
		for id := uint64(1); id <= 3000; id++ {
			if err := bp.put(id, want[id], models.FieldFloat); err != nil {
				return err
			}
		}
		return nil
	}))
	got := map[uint64][]memPoint{}
	blocks := 0
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		recent := tx.Bucket(bucketRecent)
		return tx.Bucket(bucketBlocks).ForEach(func(k, v []byte) error {
			blocks++
			require.Equal(t, u64Key(42), recent.Get(k), "block %x recorded as rebuildable from txn 42", k)
			id := binary.BigEndian.Uint64(k)
			pts, _, err := decodeBlock(nil, v)
			require.NoError(t, err, "block %x", k)
			require.Equal(t, pts[0].ts, tsFromKey(k[8:]))
			got[id] = append(got[id], pts...)
			return nil
		})
	}))
	require.Len(t, got, len(want))
	for id, pts := range want {
		require.True(t, slices.Equal(pts, got[id]), "series %d reads back as written", id)
	}
	require.Equal(t, 3000+6*3, blocks, "one block a series, four for the longest ones")
}

// jitteredSeries is n points of random values at timestamps that rise by
// random steps of every size: a block of them takes near the most bytes a
// point can.
func jitteredSeries(rng *rand.Rand, n int) []memPoint {
	pts := make([]memPoint, n)
	ts := rng.Int64N(1 << 40)
	for i := range pts {
		ts += 1 + rng.Int64N(1<<uint(rng.IntN(40)))
		pts[i] = memPoint{ts: ts, bits: rng.Uint64()}
	}
	return pts
}

// Values in the arena are copies that stay as they were, each capped so
// that appending to one cannot overwrite the next, and one larger than a
// chunk is allocated apart.
func TestValueArenaCopiesValues(t *testing.T) {
	var a valueArena
	src := []byte("abc")
	x := a.add(src)
	src[0] = 'z'
	y := a.addString("defgh")
	big := a.add(make([]byte, valueChunkBytes+1))
	w := a.addString("ij")
	require.Equal(t, "abc", string(x))
	require.Equal(t, "defgh", string(y))
	require.Len(t, big, valueChunkBytes+1)
	require.Equal(t, "ij", string(w))
	require.Equal(t, 3, cap(x), "a value cannot be appended to over its neighbour")
	_ = append(x, '!')
	require.Equal(t, "defgh", string(y))
}

// A flush whose points overlap the flushed blocks of many series merges
// into them in one transaction, and the merged blocks share value chunks:
// each rewrite once took a 64 KiB chunk of its own, 125 MiB for these
// 2,000 series, all held until the commit. The merged points must read
// back, newer values winning.
func TestMergingFlushSharesValueChunks(t *testing.T) {
	_, s := openShard1(t, manual...)
	const series = 2000
	write := func(from, to int64, v float64) {
		e := Entry{TxnID: s.LastTxnID() + 1, Term: 1}
		for h := range series {
			for ts := from; ts <= to; ts++ {
				e.Points = append(e.Points, pt("cpu", fmt.Sprintf("host=h%d", h), "usage", ts, v))
			}
		}
		require.NoError(t, s.Apply(e))
	}
	write(1, 20, 1)
	flushNow(t, s)
	write(11, 30, 2) // ts 11-20 of every series replace flushed values
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	flushNow(t, s)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(series*valueChunkBytes/4),
		"the merging flush allocated %d bytes for %d series", allocated, series)

	got, err := s.Query("cpu", map[string]string{"host": "h1999"}, 0, 100)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0].Points, 30)
	for _, p := range got[0].Points {
		want := 1.0
		if p.TS > 10 {
			want = 2
		}
		require.Equal(t, want, p.Value, "ts %d", p.TS)
	}
}
