package engine

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestIndexMemoryAccounted: the series indexes of an engine's open shards
// are in its memory account (MemoryUse().Index) once flushed, grow with the
// series, come back when a shard reopens (the index is reloaded from the
// file, ids in its slices) and leave the account when the shard closes.
func TestIndexMemoryAccounted(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, WithFlushInterval(0), WithCompactRate(0))
	rep := e.(MemoryReporter)
	write := func(first, n int) {
		pts := make([]lineproto.Point, n)
		for i := range pts {
			pts[i] = pt("m", fmt.Sprintf("host=h%d", first+i), "value", 10, float64(i))
		}
		apply(t, s, 1, pts...)
		require.NoError(t, s.(*boltShard).flushLocked())
	}
	require.Zero(t, rep.MemoryUse().Index)
	write(0, 1000)
	one := rep.MemoryUse().Index
	require.GreaterOrEqual(t, one, int64(1000*indexSeriesBytes), "every series counted")
	require.Less(t, one, int64(1000*(indexSeriesBytes+64)))
	write(1000, 1000)
	two := rep.MemoryUse().Index
	require.InDelta(t, 2*one, two, float64(one)/10, "grows with the series")
	write(0, 1000) // known series: no growth
	require.Equal(t, two, rep.MemoryUse().Index)

	require.NoError(t, s.Close())
	require.Zero(t, rep.MemoryUse().Index, "a closed shard is not charged")
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	require.Equal(t, two, rep.MemoryUse().Index, "reloaded from the file")
	key, ok := s.(*boltShard).ix.keyOf(1500)
	require.True(t, ok)
	want := lineproto.AppendSeriesKey(nil, "m", []lineproto.Tag{{Key: "host", Value: "h1499"}}, "value")
	require.Equal(t, string(want), key, "ids index the keys' slice (the second flush's series, in key order)")
	_, ok = s.(*boltShard).ix.keyOf(5000)
	require.False(t, ok)
	got, err := s.Query("m", map[string]string{"host": "h1999"}, 0, 100)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, []SeriesPoint{{TS: 10, Value: 999}}, got[0].Points)
}

// TestFlushOrder: a flush writes the known series by id (block keys are
// id | ts: the puts walk the bucket in order), then the new ones by key, the
// order their ids are given in.
func TestFlushOrder(t *testing.T) {
	ix := newSeriesIndex()
	ix.put("b", 2)
	ix.put("c", 1)
	mt := newMemtable(ix)
	for _, k := range []string{"z", "b", "a", "c", "y"} {
		mt.series = append(mt.series, memSeries{key: k})
	}
	order, ids := flushOrder(ix, mt)
	var keys []string
	for _, i := range order {
		keys = append(keys, mt.series[i].key)
	}
	require.Equal(t, []string{"c", "b", "a", "y", "z"}, keys)
	require.Equal(t, []uint64{0, 2, 0, 1, 0}, ids)
}
