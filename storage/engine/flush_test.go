package engine

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestMemoryBudgetRoomForIndexedSeries: the active memtables may hold the
// budget plus as much as the series indexes hold, so a memtable holding a
// point of each of many indexed series (past the budget alone) does not
// freeze, and once past that bound it does.
func TestMemoryBudgetRoomForIndexedSeries(t *testing.T) {
	const budget, series = 256 << 10, 3000
	e := newEngine(t, t.TempDir(), WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0), WithMemtableBytes(budget))
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	acct := s.(*boltShard).memAcct
	write := func(ts int64) {
		pts := make([]lineproto.Point, 0, 100)
		for i := range series {
			pts = append(pts, pt("m", fmt.Sprintf("host=h%05d", i), "value", ts, 1))
			if len(pts) == cap(pts) {
				apply(t, s, 1, pts...)
				pts = pts[:0]
			}
		}
	}
	write(0)
	flushNow(t, s)
	flushed := flushedTxn(s)
	index := acct.index.Load()
	require.Greater(t, index, int64(series*64), "the index accounts its series")

	write(10) // a point of every indexed series
	total, _ := acct.load()
	require.Greater(t, total, int64(budget), "past the budget alone")
	require.LessOrEqual(t, total, budget+index)
	require.Equal(t, flushed, flushedTxn(s), "within the budget and the index: no freeze")

	for ts := int64(20); flushedTxn(s) == flushed; ts += 10 {
		require.Less(t, ts, int64(1000), "the memtable never froze")
		write(ts)
		total, _ := acct.load()
		require.LessOrEqual(t, total, budget+index+int64(100*(memPointBytes+memUndoBytes)+memEntryBytes), "never more than one batch over")
	}
}
