package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestKeyOverLimitNeverReachesAFlush (issue 26 #2): an entry holding a
// series key over MaxSeriesKeyBytes is refused by Append, prepared or not,
// before it is numbered or logged; the shard keeps taking writes and
// flushing, after a restart too.
func TestKeyOverLimitNeverReachesAFlush(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir)
	long := strings.Repeat("x", MaxSeriesKeyBytes)
	bad := []lineproto.Point{pt("cpu", "host=a", "value", 1, 1), pt("cpu", "host="+long, "value", 2, 2)}
	for _, pre := range []*Prepared{nil, Prepare(bad)} {
		_, err := s.Append(Entry{TxnID: 1, Term: 1, Points: bad, Prepared: pre})
		require.ErrorIs(t, err, ErrKeyTooLarge)
		require.EqualValues(t, 1, s.NextTxnID(), "the refused entry took no txn id")
	}
	// Just under the limit is taken and flushed.
	edge := "host=" + strings.Repeat("y", MaxSeriesKeyBytes-len("cpu,host=#value"))
	apply(t, s, 1, pt("cpu", "host=a", "value", 1, 1), pt("cpu", edge, "value", 3, 3))
	flushNow(t, s)
	apply(t, s, 1, pt("cpu", "host=b", "value", 4, 4))
	flushNow(t, s)
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir)
	got, err := s.Query("cpu", nil, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, sr := range got {
		require.Less(t, len(sr.Tags["host"]), MaxSeriesKeyBytes)
	}
}

// TestFlushDropsAKeyOverLimitFromAnOldLog: a memtable holding a key over the
// limit (what a log written before the check replays) still flushes: that
// series is dropped, the others are written, and the shard goes on.
func TestFlushDropsAKeyOverLimitFromAnOldLog(t *testing.T) {
	_, s := openShard1(t)
	apply(t, s, 1, pt("cpu", "host=a", "value", 1, 1))
	bs := s.(*boltShard)
	// As if txn 1's log record held one more point, of a key over the limit.
	poison := Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{pt("cpu", "host="+strings.Repeat("z", 40<<10), "value", 2, 2)}}
	bs.wmu.Lock()
	bs.mems.Load().active.insert(poison, nil, time.Now())
	bs.wmu.Unlock()
	flushNow(t, s)
	apply(t, s, 1, pt("cpu", "host=b", "value", 3, 3))
	flushNow(t, s)
	got, err := s.Query("cpu", nil, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
}

// TestFlushReport: a failed background flush is reported with its error,
// and the first one that succeeds after it with nil.
func TestFlushReport(t *testing.T) {
	type report struct {
		db    string
		shard int
		err   error
	}
	reports := make(chan report, 16)
	_, s := openShard1(t, WithFlushPoints(2), WithFlushInterval(0), WithCompactRate(0),
		WithFlushReport(func(db string, shard int, err error) { reports <- report{db, shard, err} }))
	errDisk := errors.New("disk full")
	var failing atomic.Bool
	failing.Store(true)
	s.(*boltShard).flushHook = func(committed bool) error {
		if !committed && failing.Load() {
			return errDisk
		}
		return nil
	}
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=a", "value", 2, 2))
	apply(t, s, 1, pt("m", "h=b", "value", 1, 1)) // freezes txn 1 for the flusher
	r := <-reports
	require.Equal(t, "db1", r.db)
	require.Zero(t, r.shard)
	require.ErrorIs(t, r.err, errDisk)
	failing.Store(false)
	apply(t, s, 1, pt("m", "h=c", "value", 1, 1), pt("m", "h=c", "value", 2, 1)) // its commit flushes txn 1, freezes the rest
	apply(t, s, 1, pt("m", "h=d", "value", 1, 1))
	require.Eventually(t, func() bool {
		select {
		case r = <-reports:
			return r.err == nil
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond, "no report of the recovery")
}
