package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
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
		pr := Prepare(e.Points)
		want, err := e.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, want, append(wire.AppendHead(nil, e.TxnID, e.Term, wire.Version(e.Points)), pr.points...), "txn %d", e.TxnID)
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
	mt := newMemtable(newSeriesIndex())
	mt.insert(entries[1], &Prepare(entries[1].Points).keys, time.Time{})
	require.Equal(t, 4, len(mt.series), "cpu user, cpu idle, mem used, mem free")
	require.Equal(t, 7, mt.points)
}

// An entry appended with a Prepared made ahead is the entry appended
// without one: the same log entry (read back, and replayed at reopen), the
// same points queried. A Prepared is taken by one Append, whose queue owns
// it: the entry kept in the log holds none.
func TestAppendWithPreparedPointsIsTheSameEntry(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir)
	var want []Entry
	for txn := uint64(1); txn <= 6; txn++ {
		entry := highCardinalityEntry(txn, 500, int(txn%2)*100)
		want = append(want, entry)
		if txn%2 == 1 {
			entry.Prepared = Prepare(entry.Points)
		}
		require.NoError(t, s.Apply(entry))
	}
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	series, err := s.Query("cpu", nil, 0, 1<<62)
	require.NoError(t, err)
	require.NoError(t, e.Close())

	e, s = openShardAt(t, dir)
	got, err = s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got, "replayed from the log")
	again, err := s.Query("cpu", nil, 0, 1<<62)
	require.NoError(t, err)
	require.Equal(t, series, again)
	require.NotEmpty(t, series)
	require.NoError(t, e.Close())
}

// highCardinalityEntry is n points of distinct series (a new host tag value
// each, regions repeating), every string of it a table entry of its own
// unless repeated.
func highCardinalityEntry(txn uint64, n, hostBase int) Entry {
	e := Entry{TxnID: txn, Term: 3, Points: make([]lineproto.Point, n)}
	for i := range e.Points {
		e.Points[i] = lineproto.Point{Metric: "cpu", Field: "usage", TS: int64(txn)*10_000 + int64(i), Value: float64(i) / 3,
			Tags: []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("h%d", hostBase+i)}, {Key: "region", Value: fmt.Sprintf("r%d", i%5)}}}
	}
	return e
}
