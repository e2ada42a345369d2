package engine

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// What Append prepares must be what the committer would have made: the
// entry's encoding, and each point's series key, with the fields of one
// line (one tag slice) marked as the series of the point before. Buffers
// come back from the pool holding an earlier entry's bytes, which must not
// show through.
func TestPreparedEntryMatchesItsEncodingAndKeys(t *testing.T) {
	tags := []lineproto.Tag{{Key: "host", Value: "a"}, {Key: "region", Value: "r,1"}}
	same := []lineproto.Tag{{Key: "host", Value: "a"}, {Key: "region", Value: "r,1"}} // equal, another slice
	line := []lineproto.Point{
		{Metric: "cpu", Tags: tags, Field: "user", TS: 1, Value: 1},
		{Metric: "cpu", Tags: tags, Field: "user", TS: 2, Value: 2}, // same line, same field: same series
		{Metric: "cpu", Tags: tags, Field: "idle", TS: 2, Value: 3}, // same tags, another field
		{Metric: "cpu", Tags: same, Field: "idle", TS: 3, Value: 4}, // same series, keyed again
		{Metric: "mem", Field: "used", TS: 3, Value: 5},
		{Metric: "mem", Field: "used", TS: 4, Value: 6}, // untagged: same series
		{Metric: "mem", Field: "free", TS: 4, Value: 7},
	}
	entries := []Entry{
		{TxnID: 7, Term: 2, Points: highCardinalityEntry(7, 3000, 0).Points},
		{TxnID: 8, Term: 2, Points: line},
		{TxnID: 9, Term: 3, Points: line[4:]},
		{TxnID: 10, Term: 3},
	}
	for _, e := range entries {
		pr := prepare(&e)
		want, err := e.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, want, pr.payload, "txn %d", e.TxnID)
		require.Len(t, pr.keys.ends, len(e.Points))
		for i := range e.Points {
			p := &e.Points[i]
			key, same := pr.keys.of(i)
			require.Equal(t, i > 0 && sameSeries(&e.Points[i-1], p), same, "txn %d point %d", e.TxnID, i)
			if !same {
				require.Equal(t, string(lineproto.AppendSeriesKey(nil, p.Metric, p.Tags, p.Field)), string(key), "txn %d point %d", e.TxnID, i)
			}
		}
		pr.release()
	}
	mt := newMemtable(&seriesIndex{ids: map[string]uint64{}, keys: map[uint64]string{}, newest: map[uint64]int64{}})
	mt.insert(entries[1], &prepare(&entries[1]).keys, time.Time{})
	require.Equal(t, 4, len(mt.series), "cpu user, cpu idle, mem used, mem free")
	require.Equal(t, 7, mt.points)
}
