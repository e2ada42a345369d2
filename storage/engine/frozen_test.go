package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// pausedFlush makes the shard's next background flush stop at the hook
// (before the blocks' commit, or after it, when afterCommit) until release
// is called (at the latest when the test ends); paused is closed once it
// stops there. Later flushes run through.
type pausedFlush struct {
	paused  chan struct{}
	resume  chan struct{}
	release func()
	upto    uint64 // the last txn of the paused flush
}

func pauseNextFlush(t *testing.T, s Shard, afterCommit bool) *pausedFlush {
	p := &pausedFlush{paused: make(chan struct{}), resume: make(chan struct{})}
	p.release = sync.OnceFunc(func() { close(p.resume) })
	t.Cleanup(p.release) // before the shard's Close, which waits for the flusher
	bs := s.(*boltShard)
	first := true
	bs.flushHook = func(committed bool) error {
		if !first || committed != afterCommit {
			return nil
		}
		first = false
		if f := bs.mems.Load().frozen; f != nil {
			p.upto = f.entries[len(f.entries)-1].txn
		}
		close(p.paused)
		<-p.resume
		return nil
	}
	return p
}

// checkReads compares the read paths with the model of the log: Query and
// Scan see each acknowledged point once, with its newest value, and
// SeriesKeys lists each series once.
func checkReads(t *testing.T, s Shard, log []Entry, msg string) {
	t.Helper()
	want := modelQuery(log)
	got, err := s.Query("m", nil, -100, 1000)
	require.NoError(t, err)
	require.Equal(t, want, got, msg)
	scanned := scanAll(t, s, "m", nil, -100, 1000, func(string) bool { return true })
	require.Len(t, scanned, len(want), msg)
	var keys []string
	for _, sr := range want {
		key := seriesKeyOf(sr)
		require.Equal(t, sr.Points, scanned[key], msg)
		keys = append(keys, key)
	}
	// Each series once; a truncation leaves the keys of series it emptied.
	all := seriesKeys(t, s)
	require.Equal(t, slices.Compact(slices.Clone(all)), all, msg)
	require.Subset(t, all, keys, msg)
}

// TestReadsDuringBackgroundFlush: while a frozen memtable is being flushed
// (paused before its blocks' commit, or after it, before it is dropped),
// reads see the frozen points, the blocks and the active memtable merged
// with no point missing or doubled, and points of the active memtable that
// replace values of the frozen one win. A commit that would freeze a second
// memtable waits for the flush. Afterwards a truncation across both
// memtables' entries restores the replaced values, and a reopen keeps it all.
func TestReadsDuringBackgroundFlush(t *testing.T) {
	for _, afterCommit := range []bool{false, true} {
		name := map[bool]string{false: "before-commit", true: "after-commit"}[afterCommit]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := []Option{WithFlushPoints(4), WithFlushInterval(0), WithCompactRate(0)}
			e, s := openShardAt(t, dir, opts...)
			var log []Entry
			write := func(points ...lineproto.Point) { t.Helper(); log = applyNext(t, s, log, points...) }
			// Txn 1 is flushed: the frozen memtable later replaces one of its points.
			write(pt("m", "h=a", "value", 1, 1), pt("m", "h=z", "value", 1, 100), pt("m", "h=z", "value", 2, 200), pt("m", "h=z", "value", 3, 300))
			flushNow(t, s)
			require.EqualValues(t, 1, flushedTxn(s))

			p := pauseNextFlush(t, s, afterCommit)
			write(pt("m", "h=a", "value", 2, 2), pt("m", "h=b", "value", 1, 10))
			write(pt("m", "h=a", "value", 3, 3), pt("m", "h=z", "value", 2, 201)) // 4 points: the next commit freezes
			write(pt("m", "h=a", "value", 2, 20), pt("m", "h=c", "value", 1, 5), pt("m", "h=a", "value", 0, 0.5))
			<-p.paused
			require.EqualValues(t, 3, p.upto, "txns 2-3 are frozen")
			checkReads(t, s, log, "frozen, paused")
			write(pt("m", "h=b", "value", 1, 11), pt("m", "h=z", "value", 2, 202), pt("m", "h=z", "value", 4, 400))
			checkReads(t, s, log, "frozen, more in the active memtable")
			require.Equal(t, uint64(1), flushedTxn(s), "the flush is paused")

			// The active memtable holds 6 points: the next commit needs to
			// freeze it, and waits for the paused flush.
			next := Entry{TxnID: 6, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 2, 21), pt("m", "h=d", "value", 1, 7)}}
			done := make(chan error, 1)
			go func() { done <- s.Apply(next) }()
			require.Never(t, func() bool { return len(done) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
				"a second frozen memtable waits for the first one's flush")
			checkReads(t, s, log, "frozen, a commit waiting")
			p.release()
			require.NoError(t, <-done)
			log = append(log, next)
			checkReads(t, s, log, "after the flush")
			settle(t, s)
			require.EqualValues(t, 5, flushedTxn(s))
			checkReads(t, s, log, "both flushed")

			// Undo across what the two memtables held: back to txn 2.
			require.NoError(t, s.TruncateAfter(2))
			log = log[:2]
			checkReads(t, s, log, "truncated after 2")
			write(pt("m", "h=a", "value", 2, 22))
			require.NoError(t, s.Close())
			require.NoError(t, e.Close())
			_, s = openShardAt(t, dir, opts...)
			require.EqualValues(t, 3, s.LastTxnID())
			checkReads(t, s, log, "reopened")
		})
	}
}

// TestFailedBackgroundFlush: a background flush that fails leaves the
// memtable frozen and readable; the next commit that needs room retries the
// flush and fails with its error, changing nothing; a truncation replays the
// frozen entries it keeps; and a shard closed with a frozen memtable that
// never reached the blocks replays it from the log at the next open.
func TestFailedBackgroundFlush(t *testing.T) {
	dir := t.TempDir()
	opts := []Option{WithFlushPoints(2), WithFlushInterval(0), WithCompactRate(0)}
	e, s := openShardAt(t, dir, opts...)
	errDisk := errors.New("disk full")
	s.(*boltShard).flushHook = func(committed bool) error {
		if committed {
			return nil
		}
		return errDisk
	}
	var log []Entry
	write := func(points ...lineproto.Point) { t.Helper(); log = applyNext(t, s, log, points...) }
	write(pt("m", "h=a", "value", 1, 1), pt("m", "h=a", "value", 2, 2))
	write(pt("m", "h=a", "value", 2, 20), pt("m", "h=b", "value", 1, 10)) // froze txn 1; its flush fails
	checkReads(t, s, log, "frozen, its flush failed")
	err := s.Apply(Entry{TxnID: 3, Term: 1, Points: []lineproto.Point{pt("m", "h=c", "value", 1, 5)}})
	require.ErrorIs(t, err, errDisk, "the commit that needs room retries the flush")
	require.EqualValues(t, 2, s.LastTxnID())
	require.Zero(t, flushedTxn(s))
	checkReads(t, s, log, "the failed commit changed nothing")

	require.NoError(t, s.TruncateAfter(1))
	log = log[:1]
	checkReads(t, s, log, "truncated into the frozen entries")
	write(pt("m", "h=a", "value", 2, 21), pt("m", "h=d", "value", 1, 7)) // freezes txn 1 again
	checkReads(t, s, log, "frozen again")

	require.NoError(t, s.Close())
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, opts...)
	require.Zero(t, flushedTxn(s))
	checkReads(t, s, log, "reopened")
	flushNow(t, s)
	require.EqualValues(t, 2, flushedTxn(s))
	checkReads(t, s, log, "flushed")
}

// TestRandomWithBackgroundFlushes is TestRandomAgainstModel with the flushes
// left to the shard's flusher, beside the commits, and the model checked by
// every read path while they run.
func TestRandomWithBackgroundFlushes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	opts := []Option{WithFlushPoints(25), WithFlushInterval(0), WithRetainEntries(30), WithCompactRate(0)}
	e, s := openShardAt(t, dir, opts...)
	var log []Entry
	hosts := []string{"a", "b", "c", "d"}
	for step := range 300 {
		switch r := rng.IntN(25); {
		case r == 0 && len(log) > 0:
			to := uint64(len(log) - min(len(log), 1+rng.IntN(8)))
			if err := s.TruncateAfter(to); err == nil {
				log = log[:to]
			} else {
				require.ErrorIs(t, err, ErrCompacted, "step %d", step)
			}
		case r == 1:
			require.NoError(t, s.Close())
			require.NoError(t, e.Close())
			e, s = openShardAt(t, dir, opts...)
		default:
			points := make([]lineproto.Point, rng.IntN(10))
			for i := range points {
				ts := int64(step + rng.IntN(3))
				if rng.IntN(4) == 0 {
					ts = int64(step - rng.IntN(30)) // into what is frozen or flushed
				}
				points[i] = pt("m", "h="+hosts[rng.IntN(len(hosts))], "value", ts, float64(step*100+i))
			}
			en := Entry{TxnID: uint64(len(log) + 1), Term: 1, Points: points}
			require.NoError(t, s.Apply(en))
			log = append(log, en)
		}
		require.EqualValues(t, len(log), s.LastTxnID())
		checkReads(t, s, log, fmt.Sprintf("step %d", step))
	}
}

// applyNext applies points as the entry after log (term 1) and returns log
// with it: the model the test checks the shard against.
func applyNext(t *testing.T, s Shard, log []Entry, points ...lineproto.Point) []Entry {
	t.Helper()
	en := Entry{TxnID: uint64(len(log) + 1), Term: 1, Points: points}
	require.NoError(t, s.Apply(en))
	return append(log, en)
}

// TestCommitWaitingForAFlushIsNotArriving: a commit that must freeze a
// second memtable waits for the flush of the first, and meanwhile does not
// count as arriving at the log, so the log's writer does not wait for it
// (wal.gather); it commits once the flush ends.
func TestCommitWaitingForAFlushIsNotArriving(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(2), WithFlushInterval(0), WithCompactRate(0))
	bs := s.(*boltShard)
	p := pauseNextFlush(t, s, false)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=b", "value", 1, 1))
	apply(t, s, 1, pt("m", "h=a", "value", 2, 1), pt("m", "h=b", "value", 2, 1)) // freezes txn 1
	<-p.paused
	wait, err := s.Append(Entry{TxnID: 3, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 3, 1)}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		bs.q.mu.Lock()
		defer bs.q.mu.Unlock()
		return len(bs.q.pending) == 0 && bs.wal.arriving.Load() == 0
	}, 10*time.Second, time.Millisecond, "taken by the committer, which waits for the flush and is not on its way to the log")
	require.EqualValues(t, 2, s.LastTxnID(), "txn 3 waits for the flush of txn 1")
	p.release()
	require.NoError(t, wait())
	require.EqualValues(t, 3, s.LastTxnID())
	require.Zero(t, bs.wal.arriving.Load())
}
