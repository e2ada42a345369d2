package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestExpireBeforeDropsOldBlocksAndGivesSpaceBack: six "hours" of points in
// blocks of one flush each; expiring the first four drops their blocks
// (never one that holds a newer point), reads answer only the rest, the
// last flush's blocks are checked and expire like the others, and the file
// shrinks once the expired bytes are a large part of it.
func TestExpireBeforeDropsOldBlocksAndGivesSpaceBack(t *testing.T) {
	_, s := openShard1(t, manual...)
	const hour = int64(3600e9)
	rnd := rand.New(rand.NewPCG(1, 2))
	for h := range int64(6) {
		for i := range int64(60) {
			var pts []lineproto.Point
			for j := range int64(10) {
				ts := h*hour + (i*10+j)*int64(1e9)
				pts = append(pts, pt("m", "h=a", "value", ts, float64(ts)), pt("m", "h=b", "value", ts, 1))
				for k := range 60 { // values that do not compress: a file of some MiB
					pts = append(pts, pt("r", fmt.Sprintf("k=%d", k), "value", ts, rnd.Float64()))
				}
			}
			apply(t, s, 1, pts...)
		}
		flushNow(t, s)
	}
	before := fileSize(t, s)
	require.Equal(t, 6*62, countBlocks(t, s))

	blocks, bytes, err := s.(Expirer).ExpireBefore(4 * hour)
	require.NoError(t, err)
	require.Equal(t, 4*62, blocks, "hours 0-3 of every series")
	require.Positive(t, bytes)
	require.Equal(t, 2*62, countBlocks(t, s))
	got, err := s.Query("m", map[string]string{"h": "a"}, 0, 6*hour)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 1200)
	require.Equal(t, 4*hour, got[0].Points[0].TS)
	require.Less(t, fileSize(t, s), before, "the space went back to the file system")

	// A block straddling the cutoff stays, and one of the last flush that is
	// newer.
	apply(t, s, 1, pt("m", "h=a", "value", 7*hour, 1))
	flushNow(t, s)
	blocks, _, err = s.(Expirer).ExpireBefore(4*hour + 300e9)
	require.NoError(t, err)
	require.Zero(t, blocks, "hour 4's blocks end after the cutoff (they straddle it); hour 5's are newer")
	blocks, _, err = s.(Expirer).ExpireBefore(7 * hour)
	require.NoError(t, err)
	require.Equal(t, 2*62, blocks, "hours 4 and 5; the last flush's block holds 7h")
	got, err = s.Query("m", nil, 0, 8*hour)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 7*hour, got[0].Points[0].TS)
}

func fileSize(t testing.TB, s Shard) int64 { return sizeOf(t, s.(*boltShard).path) }

func sizeOf(t testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}
