package engine

import (
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

// TestGroupCommitQueuedEntriesShareOneFsync: entries appended while a commit
// is under way (here: held back by the write mutex) go into the log in one
// commit, are visible together, and the txn id only counts them once they
// are durable.
func TestGroupCommitQueuedEntriesShareOneFsync(t *testing.T) {
	_, s := openShard1(t, manual...)
	bs := s.(*boltShard)
	apply(t, s, 1, pt("m", "h=a", "value", 0, 0))
	before := bs.LogCommits()

	bs.wmu.Lock() // what a commit, a flush or a compaction step holds
	var waits []func() error
	for i := 1; i <= 8; i++ {
		require.EqualValues(t, i+1, s.NextTxnID())
		wait, err := s.Append(Entry{TxnID: s.NextTxnID(), Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", int64(i), float64(i))}})
		require.NoError(t, err)
		waits = append(waits, wait)
	}
	require.EqualValues(t, 1, s.LastTxnID(), "queued entries are not counted before their commit")
	_, err := s.Append(Entry{TxnID: 5, Term: 1})
	require.ErrorIs(t, err, ErrTxnGap, "the next txn id counts the queued entries")
	_, err = s.Append(Entry{TxnID: 10, Term: 0})
	require.ErrorIs(t, err, ErrTermRegress)
	bs.wmu.Unlock()

	for _, w := range waits {
		require.NoError(t, w())
	}
	require.EqualValues(t, 9, s.LastTxnID())
	commits := bs.LogCommits() - before
	require.LessOrEqual(t, commits, uint64(2), "8 queued entries: the one the committer took first, then the rest together")
	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 9)
	es, err := s.Entries(1, 0)
	require.NoError(t, err)
	require.Len(t, es, 8)
}

// TestConcurrentWritersShareFsyncs: writers that stage their entries
// outside a lock, number and queue them under it and wait for durability
// outside it (as the storage role's leaders do) need fewer log commits than
// entries; every acknowledged entry is there, and the log holds each at the
// txn id its Enqueue returned, in order, before and after a reopen (log
// order = txn order = apply order).
func TestConcurrentWritersShareFsyncs(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, WithFlushPoints(500), WithFlushInterval(0), WithCompactRate(0))
	const writers, each = 8, 25
	var numbering sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	var got sync.Map // txn -> the value its entry's point holds
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v := float64(w*1000 + i)
				st, err := s.Stage(Entry{Term: 1, Points: []lineproto.Point{pt("m", "w="+string(rune('a'+w)), "value", int64(i), v)}})
				var txn uint64
				var wait func() error
				if err == nil {
					numbering.Lock()
					txn, wait, err = s.Enqueue(st)
					numbering.Unlock()
				}
				if err == nil {
					got.Store(txn, v)
					err = wait()
				}
				if err != nil {
					errs <- err
					return
				}
				if s.LastTxnID() < txn {
					errs <- ErrNoEntry // acknowledged but not counted
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, writers*each, s.LastTxnID())
	commits := s.(*boltShard).LogCommits()
	t.Logf("%d entries in %d log commits", writers*each, commits)
	require.Less(t, commits, uint64(writers*each), "concurrent entries shared fsyncs")
	checkLogOrder := func(s Shard) {
		es, err := s.Entries(0, 0)
		require.NoError(t, err)
		require.Len(t, es, writers*each)
		for i, en := range es {
			require.EqualValues(t, i+1, en.TxnID)
			v, ok := got.Load(en.TxnID)
			require.True(t, ok)
			require.Equal(t, v, en.Points[0].Value, "txn %d holds the entry its Enqueue numbered", en.TxnID)
		}
		series, err := s.Query("m", nil, 0, 100)
		require.NoError(t, err)
		require.Len(t, series, writers)
		for _, sr := range series {
			require.Len(t, sr.Points, each)
		}
	}
	checkLogOrder(s)
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, WithFlushPoints(500), WithFlushInterval(0), WithCompactRate(0))
	checkLogOrder(s)
}

// TestStageAndEnqueue: Stage refuses what Append refuses without taking a
// txn id; Enqueue numbers an entry staged with TxnID 0, checks one staged
// with its own, and queues a Staged once; Append still wants its TxnID.
func TestStageAndEnqueue(t *testing.T) {
	_, s := openShard1(t, manual...)
	_, err := s.Stage(Entry{Term: 1, Points: []lineproto.Point{pt("m", "h="+strings.Repeat("x", MaxSeriesKeyBytes), "value", 1, 1)}})
	require.ErrorIs(t, err, ErrKeyTooLarge)
	_, err = s.Stage(Entry{Term: 1, Points: []lineproto.Point{pt("m", "", "value", 1, 1)}, Delete: &wire.Delete{Metric: "m"}})
	require.ErrorIs(t, err, ErrBadDelete)
	require.EqualValues(t, 1, s.NextTxnID(), "refused entries took no txn id")

	st, err := s.Stage(Entry{Term: 1, Points: []lineproto.Point{pt("m", "", "value", 1, 1)}})
	require.NoError(t, err)
	txn, wait, err := s.Enqueue(st)
	require.NoError(t, err)
	require.EqualValues(t, 1, txn)
	require.NoError(t, wait())
	_, _, err = s.Enqueue(st)
	require.ErrorIs(t, err, errNotStaged, "a Staged is queued once")

	st, err = s.Stage(Entry{TxnID: 3, Term: 1, Points: []lineproto.Point{pt("m", "", "value", 2, 2)}})
	require.NoError(t, err)
	_, _, err = s.Enqueue(st)
	require.ErrorIs(t, err, ErrTxnGap)
	st, err = s.Stage(Entry{Term: 0, Points: []lineproto.Point{pt("m", "", "value", 2, 2)}})
	require.NoError(t, err)
	_, _, err = s.Enqueue(st)
	require.ErrorIs(t, err, ErrTermRegress)
	_, err = s.Append(Entry{Term: 1, Points: []lineproto.Point{pt("m", "", "value", 2, 2)}})
	require.ErrorIs(t, err, ErrTxnGap, "Append takes no TxnID 0")
	require.Zero(t, s.(*boltShard).wal.arriving.Load(), "refused entries do not count as arriving at the log")
	require.EqualValues(t, 2, s.NextTxnID())
}

// TestTruncateWithQueuedEntries: an entry queued when a truncation comes is
// either committed before it (and cut by it) or fails, never committed after
// it with a txn id that no longer follows; the next txn id follows the cut.
func TestTruncateWithQueuedEntries(t *testing.T) {
	_, s := openShard1(t, manual...)
	bs := s.(*boltShard)
	for i := 1; i <= 5; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	bs.wmu.Lock()
	var waits []func() error
	for i := 6; i <= 8; i++ {
		wait, err := s.Append(Entry{TxnID: uint64(i), Term: 1, Points: []lineproto.Point{pt("m", "", "value", int64(i), 1)}})
		require.NoError(t, err)
		waits = append(waits, wait)
	}
	truncated := make(chan error)
	go func() { truncated <- s.TruncateAfter(3) }()
	bs.wmu.Unlock()
	require.NoError(t, <-truncated)
	for _, w := range waits {
		if err := w(); err != nil {
			require.ErrorIs(t, err, ErrTxnGap)
		}
	}
	require.EqualValues(t, 3, s.LastTxnID())
	require.EqualValues(t, 4, s.NextTxnID())
	require.Zero(t, bs.wal.arriving.Load(), "failed entries no longer count as arriving at the log")
	require.NoError(t, s.Apply(Entry{TxnID: 4, Term: 2, Points: []lineproto.Point{pt("m", "", "value", 4, 2)}}))
	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 1}, {TS: 2, Value: 1}, {TS: 3, Value: 1}, {TS: 4, Value: 2}}, got[0].Points)
}

// TestCloseFailsQueuedEntries: Close waits for the committer and fails what
// it did not commit; nothing is acknowledged that is not in the log.
func TestCloseFailsQueuedEntries(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	bs := s.(*boltShard)
	bs.wmu.Lock()
	var waits []func() error
	for i := 1; i <= 4; i++ {
		w, err := s.Append(Entry{TxnID: uint64(i), Term: 1, Points: []lineproto.Point{pt("m", "", "value", int64(i), 1)}})
		require.NoError(t, err)
		waits = append(waits, w)
	}
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	bs.wmu.Unlock()
	require.NoError(t, <-closed)
	acked := 0
	for _, w := range waits {
		if err := w(); err == nil {
			acked++
		} else {
			require.ErrorIs(t, err, ErrClosed)
		}
	}
	_, err := s.Append(Entry{TxnID: 5, Term: 1})
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, bs.wal.arriving.Load(), "failed entries no longer count as arriving at the log")
	require.NoError(t, e.Close()) // one engine per data dir at a time: it holds the log
	s, err = newEngine(t, dir, manual...).Open("db1", 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, s.LastTxnID(), uint64(acked), "every acknowledged entry is in the log")
}

// TestTrimFloorDropsReplicatedFlushedEntries: entries every follower holds
// go once flushed, whatever the retention bounds; the others stay; past the
// bounds even those go (a follower that far behind gets a snapshot).
func TestTrimFloorDropsReplicatedFlushedEntries(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0), WithRetainEntries(10))
	for i := 1; i <= 8; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	flushNow(t, s)
	_, err := s.Entries(0, 0)
	require.NoError(t, err, "the retention bounds keep every entry")

	s.SetTrimFloor(5) // the slowest follower holds up to 5
	apply(t, s, 1, pt("m", "", "value", 9, 1))
	_, err = s.Entries(4, 0)
	require.ErrorIs(t, err, ErrCompacted)
	es, err := s.Entries(5, 0)
	require.NoError(t, err)
	require.Len(t, es, 4, "what a follower still needs stays")
	term, err := s.TermAt(5)
	require.NoError(t, err)
	require.EqualValues(t, 1, term)

	s.SetTrimFloor(100) // nobody needs anything: only the unflushed tail stays
	apply(t, s, 1, pt("m", "", "value", 10, 1))
	_, err = s.Entries(7, 0)
	require.ErrorIs(t, err, ErrCompacted, "entries up to the last flush went")
	es, err = s.Entries(8, 0)
	require.NoError(t, err)
	require.Len(t, es, 2, "the unflushed ones stay")

	s.SetTrimFloor(0) // a follower at 0: the retention bound (10 entries) still applies
	for i := 11; i <= 30; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	flushNow(t, s)
	apply(t, s, 1, pt("m", "", "value", 31, 1))
	_, err = s.Entries(20, 0)
	require.ErrorIs(t, err, ErrCompacted, "beyond retention, a lagging follower needs a snapshot")
	es, err = s.Entries(21, 0)
	require.NoError(t, err)
	require.Len(t, es, 10)

	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 31, "trimming the log never drops points")
}

func TestTakeGroupBoundsPoints(t *testing.T) {
	entry := func(points int) *pendingEntry {
		return &pendingEntry{e: Entry{Points: make([]lineproto.Point, points)}}
	}
	const limit = 100
	pending := []*pendingEntry{entry(limit - 10), entry(5), entry(10), entry(limit + 1), entry(1), entry(2)}
	var sizes []int
	for len(pending) > 0 {
		sizes = append(sizes, len(takeGroup(&pending, limit)))
	}
	require.Equal(t, []int{2, 1, 1, 2}, sizes, "a group stops before the bound; an entry over it goes alone")
	require.Empty(t, takeGroup(&pending, limit))
}
