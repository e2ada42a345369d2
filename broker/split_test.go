package broker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestSplitByShard: every point lands in the shard its series key hashes
// to, in body order, and no point is lost or repeated (the points are
// reordered in place, so each round splits a fresh copy).
func TestSplitByShard(t *testing.T) {
	var body []byte
	for i := range 500 {
		body = fmt.Appendf(body, "cpu,host=h%d,region=r%d usage=%d,idle=%d %d\n", i%37, i%5, i, -i, i)
	}
	points, err := lineproto.Parse(body, "ns", 0)
	require.NoError(t, err)
	for _, shards := range []int{1, 3, 8} {
		groups := splitByShard(slices.Clone(points), shards)
		require.Len(t, groups, shards)
		want := make([][]lineproto.Point, shards)
		for _, p := range points {
			s := lineproto.ShardOf(p.SeriesKey(), shards)
			want[s] = append(want[s], p)
		}
		n := 0
		for s := range groups {
			require.Equal(t, len(want[s]), len(groups[s]), "shard %d of %d", s, shards)
			for i := range want[s] {
				require.Equal(t, want[s][i], groups[s][i])
			}
			n += len(groups[s])
		}
		require.Equal(t, len(points), n)
	}
}
