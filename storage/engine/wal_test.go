package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func withSegmentBytes(n int64) Option { return func(o *options) { o.segmentBytes = n } }

func walOf(e Engine) *wal { return e.(*boltEngine).wal }

// segments lists the log's segment files.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, walDirName))
	require.NoError(t, err)
	var out []string
	for _, de := range des {
		if filepath.Ext(de.Name()) == ".wal" {
			out = append(out, filepath.Join(dir, walDirName, de.Name()))
		}
	}
	return out
}

// usedSegments lists the segment files of e's open log up to its active
// one: not the next one, made ahead (walspare.go) or being made.
func usedSegments(t *testing.T, e Engine, dir string) []string {
	t.Helper()
	w := walOf(e)
	w.mu.Lock()
	active := w.segs[len(w.segs)-1].seq
	w.mu.Unlock()
	var out []string
	for _, p := range segments(t, dir) {
		seq, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".wal"), 16, 64)
		require.NoError(t, err)
		if seq <= active {
			out = append(out, p)
		}
	}
	return out
}

// copyDataDir copies the shard files and the log of a closed engine.
func copyDataDir(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	}))
}

// TestTornLogRecordAtEveryOffset writes the log's last record (txn 6 of
// shard 0, after records of two shards interleaved) cut at every byte
// offset, with zeros after the cut as a torn page leaves it, and with one
// byte flipped: each open keeps exactly the entries before it, in both
// shards, cuts the bad tail off the file, and the shard goes on from txn 6.
func TestTornLogRecordAtEveryOffset(t *testing.T) {
	golden := t.TempDir()
	e := newEngine(t, golden, manual...)
	a, err := e.Open("db1", 0)
	require.NoError(t, err)
	b, err := e.Open("db1", 1)
	require.NoError(t, err)
	for i := 1; i <= 5; i++ {
		apply(t, a, 1, pt("m", "h=a", "value", int64(i), float64(i)), pt("m", "h=b", "value", int64(i), float64(-i)))
		apply(t, b, 2, pt("n", "", "value", int64(i), float64(i)))
	}
	apply(t, a, 1, pt("m", "h=a", "value", 6, 6), pt("m", "h=b", "value", 2, 60)) // the last record; overwrites 2
	wantA, err := a.Entries(0, 5)
	require.NoError(t, err)
	wantB, err := b.Entries(0, 0)
	require.NoError(t, err)
	require.NoError(t, e.Close())

	segs := segments(t, golden)
	require.Len(t, segs, 1)
	data, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	start := 0
	for off := 0; off < len(data); {
		_, _, size, ok := parseRecord(data[off:])
		require.True(t, ok)
		start, off = off, off+size
	}
	rec := data[start:]
	require.Greater(t, len(rec), 40)

	check := func(t *testing.T, seg []byte, what string) {
		dir := t.TempDir()
		copyDataDir(t, golden, dir)
		require.NoError(t, os.WriteFile(filepath.Join(dir, walDirName, filepath.Base(segs[0])), seg, 0o600))
		e, err := NewBoltEngine(dir, manual...)
		require.NoError(t, err, what)
		a, err := e.Open("db1", 0)
		require.NoError(t, err, what)
		b, err := e.Open("db1", 1)
		require.NoError(t, err, what)
		require.EqualValues(t, 5, a.LastTxnID(), what)
		got, err := a.Entries(0, 0)
		require.NoError(t, err, what)
		require.Equal(t, wantA, got, what)
		got, err = b.Entries(0, 0)
		require.NoError(t, err, what)
		require.Equal(t, wantB, got, what)
		q, err := a.Query("m", map[string]string{"h": "b"}, 0, 100)
		require.NoError(t, err, what)
		require.Equal(t, []SeriesPoint{{TS: 1, Value: -1}, {TS: 2, Value: -2}, {TS: 3, Value: -3}, {TS: 4, Value: -4}, {TS: 5, Value: -5}}, q[0].Points, what)
		fi, err := os.Stat(filepath.Join(dir, walDirName, filepath.Base(segs[0])))
		require.NoError(t, err)
		require.EqualValues(t, start, fi.Size(), "%s: the torn tail is cut off the file", what)
		// Txn 6 again, then a reopen: the new record follows the cut.
		apply(t, a, 2, pt("m", "h=a", "value", 6, 7))
		require.NoError(t, e.Close())
		e2, err := NewBoltEngine(dir, manual...)
		require.NoError(t, err, what)
		defer e2.Close()
		a, err = e2.Open("db1", 0)
		require.NoError(t, err, what)
		require.EqualValues(t, 6, a.LastTxnID(), what)
		require.EqualValues(t, 2, a.LastTerm(), what)
	}
	for k := range len(rec) {
		cut := slices.Clone(data[:start+k])
		check(t, cut, "cut at "+strconv.Itoa(k))
		check(t, append(cut, make([]byte, len(rec)-k)...), "zeros from "+strconv.Itoa(k))
		flipped := slices.Clone(data)
		flipped[start+k] ^= 0x40
		check(t, flipped, "flipped byte "+strconv.Itoa(k))
	}
}

// TestBadRecordBeforeTheLastSegmentIsAnError: only the last segment may end
// torn; anything else is reported with the file's path, not cut.
func TestBadRecordBeforeTheLastSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir, append(slices.Clone(manual), withSegmentBytes(256))...)
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	for i := range 10 {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1), pt("m", "h=x", "value", int64(i), 1))
	}
	require.NoError(t, e.Close())
	segs := segments(t, dir)
	require.Greater(t, len(segs), 2)
	data, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	data[len(data)-1] ^= 1
	require.NoError(t, os.WriteFile(segs[0], data, 0o600))
	_, err = NewBoltEngine(dir, manual...)
	require.ErrorIs(t, err, ErrWALCorrupt)
	require.ErrorContains(t, err, segs[0])
}

// TestCommitsOfShardsShareOneLogWrite holds the log's writer while eight
// shards commit: the commits queued behind the group it took go out together,
// so eight commits take at most two writes and fsyncs.
func TestCommitsOfShardsShareOneLogWrite(t *testing.T) {
	e := newEngine(t, t.TempDir(), manual...)
	w := walOf(e)
	shards := make([]Shard, 8)
	for i := range shards {
		s, err := e.Open("db1", i)
		require.NoError(t, err)
		shards[i] = s
	}
	groups := func() uint64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.groups
	}
	before := groups()
	w.wrMu.Lock()
	held := true
	defer func() {
		if held {
			w.wrMu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() { apply(t, s, 1, pt("m", "", "value", int64(i), 1)) })
	}
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		// The writer took a first group and waits for wrMu; the rest queued.
		return w.writing && w.inGroup+len(w.queue) == len(shards)
	}, 10*time.Second, time.Millisecond)
	held = false
	w.wrMu.Unlock()
	wg.Wait()
	require.LessOrEqual(t, groups()-before, uint64(2), "8 commits of 8 shards, at most 2 log writes")
	for _, s := range shards {
		require.EqualValues(t, 1, s.LastTxnID())
	}
}

// The log's writer waits for entries on their way before it takes a group:
// an entry of shard 1 appended while shard 0's waits in the writer's
// gather goes out in the same write. An arrival that never comes holds the
// writer back only gatherWait.
func TestLogWriterGathersArrivingEntries(t *testing.T) {
	e := newEngine(t, t.TempDir(), manual...)
	w := walOf(e)
	s0, err := e.Open("db1", 0)
	require.NoError(t, err)
	s1, err := e.Open("db1", 1)
	require.NoError(t, err)
	groups := func() uint64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.groups
	}
	queued := func(n int) func() bool {
		return func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.writing && len(w.queue) == n
		}
	}
	before := groups()
	w.gatherWait = time.Hour // the arrival below ends the wait, not the bound
	w.arrive(1)              // an entry on its way
	var wg sync.WaitGroup
	wg.Go(func() { apply(t, s0, 1, pt("m", "", "value", 1, 1)) })
	require.Eventually(t, queued(1), 10*time.Second, time.Millisecond, "shard 0's entry waits in the gather")
	wg.Go(func() { apply(t, s1, 1, pt("m", "", "value", 1, 1)) })
	require.Eventually(t, queued(2), 10*time.Second, time.Millisecond, "shard 1's entry joins it")
	w.depart(1) // the last arrival: the writer goes
	wg.Wait()
	require.Equal(t, uint64(1), groups()-before, "both shards' entries in one log write")
	require.Zero(t, w.arriving.Load())
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.writing
	}, 10*time.Second, time.Millisecond)

	w.gatherWait = gatherWait
	w.arrive(1) // never comes
	apply(t, s0, 1, pt("m", "", "value", 2, 1))
	w.depart(1)
	require.EqualValues(t, 2, s0.LastTxnID())
	require.EqualValues(t, 1, s1.LastTxnID())
}

// Entries queued behind a shard's commit under way do not count as
// arriving at the log (they cannot reach it before that commit's write
// ends); the committer counts them when it takes them.
func TestQueuedBehindACommitIsNotArriving(t *testing.T) {
	_, s := openShard1(t, manual...)
	bs := s.(*boltShard)
	bs.wmu.Lock() // the committer takes its first group and waits here
	first, err := s.Append(Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{pt("m", "", "value", 1, 1)}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		bs.q.mu.Lock()
		defer bs.q.mu.Unlock()
		return len(bs.q.pending) == 0
	}, 10*time.Second, time.Millisecond, "the committer took the first entry")
	waits := []func() error{first}
	for i := 2; i <= 4; i++ {
		wait, err := s.Append(Entry{TxnID: uint64(i), Term: 1, Points: []lineproto.Point{pt("m", "", "value", int64(i), 1)}})
		require.NoError(t, err)
		waits = append(waits, wait)
	}
	require.EqualValues(t, 1, bs.wal.arriving.Load(), "only the entry the committer took is on its way")
	bs.wmu.Unlock()
	for _, wait := range waits {
		require.NoError(t, wait())
	}
	require.Zero(t, bs.wal.arriving.Load())
	require.EqualValues(t, 4, s.LastTxnID())
}

// TestLogSegmentsGoOnceEveryShardReleasedThem: a segment stays while one
// shard still needs a record in it (unflushed, or above its trim floor),
// and goes once none does; the shards reopen with their data and logs.
func TestLogSegmentsGoOnceEveryShardReleasedThem(t *testing.T) {
	dir := t.TempDir()
	opts := append(slices.Clone(manual), withSegmentBytes(256))
	e := newEngine(t, dir, opts...)
	a, err := e.Open("db1", 0)
	require.NoError(t, err)
	b, err := e.Open("db2", 0)
	require.NoError(t, err)
	for i := range 40 {
		apply(t, a, 1, pt("m", "", "value", int64(i), float64(i)))
		apply(t, b, 1, pt("n", "", "value", int64(i), float64(i)))
	}
	n := len(usedSegments(t, e, dir))
	require.Greater(t, n, 4)
	a.SetTrimFloor(40)
	b.SetTrimFloor(40)
	flushNow(t, a)
	require.Len(t, usedSegments(t, e, dir), n, "b's unflushed records keep every segment")
	b.SetTrimFloor(10)
	flushNow(t, b)
	left := len(usedSegments(t, e, dir))
	require.Less(t, left, n, "segments below b's floor went")
	require.Greater(t, left, 1, "b still needs its entries after 10")
	_, err = b.Entries(9, 0)
	require.ErrorIs(t, err, ErrCompacted)
	es, err := b.Entries(10, 0)
	require.NoError(t, err)
	require.Len(t, es, 30)

	a.SetTrimFloor(41)
	b.SetTrimFloor(41)
	apply(t, b, 1, pt("n", "", "value", 40, 40))
	flushNow(t, b)
	apply(t, a, 1, pt("m", "", "value", 40, 40))
	flushNow(t, a)
	require.Len(t, usedSegments(t, e, dir), 1, "nothing needed: only a fresh active segment stays")
	require.Zero(t, walOf(e).walSize())

	require.NoError(t, e.Close())
	e = newEngine(t, dir, opts...)
	for _, id := range []shardID{{"db1", 0}, {"db2", 0}} {
		s, err := e.Open(id.db, id.shard)
		require.NoError(t, err)
		require.EqualValues(t, 41, s.LastTxnID())
		require.EqualValues(t, 1, s.LastTerm())
		term, err := s.TermAt(41)
		require.NoError(t, err)
		require.EqualValues(t, 1, term)
		q, err := s.Query(map[string]string{"db1": "m", "db2": "n"}[id.db], nil, 0, 100)
		require.NoError(t, err)
		require.Len(t, q[0].Points, 41)
		apply(t, s, 2, pt("x", "", "value", 1, 1))
	}
}

// TestDropForgetsTheShardsRecords: a dropped shard's records never come back
// in a shard of the same name, and stop holding their segments.
func TestDropForgetsTheShardsRecords(t *testing.T) {
	dir := t.TempDir()
	opts := append(slices.Clone(manual), withSegmentBytes(128))
	e, s := openShardAt(t, dir, opts...)
	for i := range 20 {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	require.Greater(t, len(usedSegments(t, e, dir)), 2)
	require.NoError(t, e.Drop("db1", 0))
	require.Len(t, usedSegments(t, e, dir), 1, "the dropped shard's records held the segments")
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	require.Zero(t, s.LastTxnID())
	apply(t, s, 1, pt("m", "", "value", 100, 1))
	require.NoError(t, e.Close())

	e, s = openShardAt(t, dir, opts...)
	require.EqualValues(t, 1, s.LastTxnID())
	q, err := s.Query("m", nil, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 100, Value: 1}}, q[0].Points)
	require.NoError(t, e.Close())

	// Dropped without being opened since the start: the records found at
	// open go too.
	e = newEngine(t, dir, opts...)
	require.Len(t, walOf(e).scanned, 1)
	require.NoError(t, e.Drop("db1", 0))
	require.Empty(t, walOf(e).scanned)
	require.Zero(t, walOf(e).walSize())
}

// TestOpenMigratesTheLogOfThePreviousFormat: a shard file whose log (with
// unflushed entries) is in its log bucket opens with every entry, moved into
// the write-ahead log; the bucket is emptied, and the shard keeps working
// after a reopen.
func TestOpenMigratesTheLogOfThePreviousFormat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db1", "0.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o750))
	db, err := openBolt(path)
	require.NoError(t, err)
	var want []Entry
	for i := uint64(1); i <= 3; i++ {
		want = append(want, Entry{TxnID: i, Term: i, Points: []lineproto.Point{pt("cpu", "host=a", "value", int64(i), float64(i))}})
	}
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, e := range want {
			if err := tx.Bucket(bucketLog).Put(u64Key(e.TxnID), e.appendBinary(nil)); err != nil {
				return err
			}
		}
		return writeMeta(tx, shardMeta{lastTxn: 3, lastTerm: 3})
	}))
	require.NoError(t, db.Close())

	e, s := openShardAt(t, dir, manual...)
	require.EqualValues(t, 3, s.LastTxnID())
	require.EqualValues(t, 3, s.LastTerm())
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, s.(*boltShard).view(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketLog).Cursor().First()
		require.Nil(t, k, "the log left the shard file")
		return nil
	}))
	require.NoError(t, e.Close())

	s, err = newEngine(t, dir, manual...).Open("db1", 0)
	require.NoError(t, err)
	got, err = s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, s.TruncateAfter(1))
	q, err := s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 1}}, q[0].Points)
}

// TestRestoreTakesASnapshotOfThePreviousFormat: a bare bbolt file with its
// log inside, as older binaries send, restores with its log.
func TestRestoreTakesASnapshotOfThePreviousFormat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "old.db")
	db, err := openBolt(path)
	require.NoError(t, err)
	e1 := Entry{TxnID: 1, Term: 4, Points: []lineproto.Point{pt("cpu", "", "value", 1, 1)}}
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketLog).Put(u64Key(1), e1.appendBinary(nil)); err != nil {
			return err
		}
		return writeMeta(tx, shardMeta{lastTxn: 1, lastTerm: 4})
	}))
	var snap bytes.Buffer
	require.NoError(t, db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&snap); return err }))
	require.NoError(t, db.Close())

	_, s := openShard1(t, manual...)
	apply(t, s, 1, pt("other", "", "value", 1, 1))
	require.NoError(t, s.Restore(&snap))
	require.EqualValues(t, 1, s.LastTxnID())
	require.EqualValues(t, 4, s.LastTerm())
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, []Entry{e1}, got)
	q, err := s.Query("cpu", nil, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 1}}, q[0].Points)
}

// TestSecondEngineOnTheDirIsRefused: one log, one writer; a second engine on
// the same directory (another process, in production) gets ErrDirInUse, and
// opens once the first one closed.
func TestSecondEngineOnTheDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	e, err := NewBoltEngine(dir, manual...)
	require.NoError(t, err)
	_, err = NewBoltEngine(dir, manual...)
	require.ErrorIs(t, err, ErrDirInUse)
	require.NoError(t, e.Close())
	newEngine(t, dir, manual...)
}

// A lone commit on an idle log is written and synced by its shard's
// committer itself: no writer goroutine is handed the group, so no other
// goroutine must run for it to become durable (issue 21).
func TestLoneCommitIsWrittenByItsCommitter(t *testing.T) {
	e, s := openShard1(t, manual...)
	w := walOf(e)
	w.wrMu.Lock() // whoever writes the group stops in writeGroup
	held := true
	defer func() {
		if held {
			w.wrMu.Unlock()
		}
	}()
	wait, err := s.Append(Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{pt("m", "", "value", 1, 1)}})
	require.NoError(t, err)
	inWrite := func() string {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*wal).writeGroup") {
				return g
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return inWrite() != "" }, 10*time.Second, time.Millisecond)
	require.Contains(t, inWrite(), "(*boltShard).commitLoop", "the committer writes its group")
	held = false
	w.wrMu.Unlock()
	require.NoError(t, wait())
	require.EqualValues(t, 1, s.LastTxnID())
}
