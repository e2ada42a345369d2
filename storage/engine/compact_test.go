package engine

import (
	"math"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestCompactRunTrim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []int
		pol    compactPolicy
		keep   []int // the counts of the blocks left to merge; nil: none
	}{
		{"like sizes merge", []int{1, 1, 1, 1}, backgroundCompact, []int{1, 1, 1, 1}},
		{"too short", []int{1, 1, 1}, backgroundCompact, nil},
		{"a big head stays", []int{8, 1, 1, 1, 1}, backgroundCompact, []int{1, 1, 1, 1}},
		{"a head as big as the rest joins", []int{4, 1, 1, 1, 1}, backgroundCompact, []int{4, 1, 1, 1, 1}},
		{"heads stay one after the other", []int{16, 8, 1, 1, 1, 1}, backgroundCompact, []int{1, 1, 1, 1}},
		{"a big head leaves too few", []int{9, 1, 1, 1}, backgroundCompact, nil},
		{"full compaction takes the head", []int{8, 1}, fullCompact, []int{8, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r compactRun
			var keys []byte
			for i, n := range tc.counts {
				pts := make([]memPoint, n)
				for j := range pts {
					pts[j] = memPoint{ts: int64(100*i + j)}
				}
				v := encodeBlock(nil, pts, models.FieldFloat)
				h, _, err := parseBlock(v)
				require.NoError(t, err)
				r.add(&keys, blockKey(1, int64(100*i)), v, h)
			}
			ok := r.trim(tc.pol)
			if tc.keep == nil {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.keep, r.counts)
			require.Len(t, r.keys, len(tc.keep))
			first := len(tc.counts) - len(tc.keep)
			require.Equal(t, blockKey(1, int64(100*first)), r.keys[0], "the blocks kept are the last ones")
			pts, err := r.decode(nil)
			require.NoError(t, err)
			require.Len(t, pts, sum(tc.keep))
			require.Equal(t, int64(100*first), pts[0].ts)
		})
	}
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

// blockCounts maps every block key of the shard to its point count.
func blockCounts(t *testing.T, s Shard) map[string]int {
	out := map[string]int{}
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBlocks).ForEach(func(k, v []byte) error {
			h, _, err := parseBlock(v)
			out[string(k)] = h.count
			return err
		})
	}))
	return out
}

// TestBackgroundCompactionIsTiered: a series that gets one point per flush,
// with a background compaction step after each, has each of its points
// rewritten about log2(points) times, not once every few flushes (which
// made compaction a third of a million-series node's CPU), and every
// point stays readable.
func TestBackgroundCompactionIsTiered(t *testing.T) {
	_, s := openShard1(t, manual...)
	const flushes = 256
	rewritten := 0
	for f := range flushes {
		apply(t, s, 1, pt("m", "h=a", "value", int64(f)*10, float64(f)))
		flushNow(t, s)
		before := blockCounts(t, s)
		_, _, err := s.(*boltShard).compactStep(1<<30, backgroundCompact)
		require.NoError(t, err)
		for k, n := range blockCounts(t, s) {
			if before[k] != n { // a merged block keeps its first block's key
				rewritten += n
			}
		}
	}
	got, err := s.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Len(t, got[0].Points, flushes)
	for i, p := range got[0].Points {
		require.Equal(t, SeriesPoint{TS: int64(i) * 10, Value: float64(i)}, p)
	}
	// Merging the growing block every 4 flushes rewrites ~flushes^2/8
	// points (8,000 here); tiered, at most flushes*log2(flushes).
	require.LessOrEqual(t, rewritten, flushes*8)
	require.Less(t, len(blockCounts(t, s)), 20)
}

// TestBackgroundCompactionFollowsFlushes: the background loop merges the
// blocks of successive flushes on its own (woken by each flush, not by a
// ticker), and a shard that flushes nothing gets no pass.
func TestBackgroundCompactionFollowsFlushes(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(1<<30))
	bs := s.(*boltShard)
	for f := range 8 {
		apply(t, s, 1, pt("m", "h=a", "value", int64(f)*10, float64(f)))
		flushNow(t, s)
	}
	require.Eventually(t, func() bool { return countBlocks(t, s) < 8 }, 10*time.Second, 10*time.Millisecond,
		"the flushes' blocks were never merged in the background")
	t.Logf("blocks: %d", countBlocks(t, s))
	// The last flush may send its wake-up after the loop took its flag
	// (flag first, then the signal): that spare wake-up finds nothing and
	// is spent; then the loop sleeps with nothing pending.
	require.Eventually(t, func() bool { return !bs.flushed.Load() && len(bs.flushSig) == 0 }, 10*time.Second, 10*time.Millisecond,
		"a wake-up left with nothing flushed")
	got, err := s.Query("m", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 8)
}
