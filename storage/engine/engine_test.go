package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

func newEngine(t testing.TB, dir string, opts ...Option) Engine {
	t.Helper()
	e, err := NewBoltEngine(dir, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func openShard1(t testing.TB, opts ...Option) (Engine, Shard) {
	t.Helper()
	return openShardAt(t, t.TempDir(), opts...)
}

// openShardAt opens shard 0 of db1 in a new engine over dir.
func openShardAt(t testing.TB, dir string, opts ...Option) (Engine, Shard) {
	t.Helper()
	e := newEngine(t, dir, opts...)
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	return e, s
}

func pt(metric, tags, field string, ts int64, v float64) lineproto.Point {
	p := lineproto.Point{Metric: metric, Field: field, TS: ts, Value: v}
	if tags != "" {
		for kv := range strings.SplitSeq(tags, ",") {
			k, v, _ := strings.Cut(kv, "=")
			p.Tags = append(p.Tags, lineproto.Tag{Key: k, Value: v})
		}
	}
	return p
}

func apply(t testing.TB, s Shard, term uint64, points ...lineproto.Point) {
	t.Helper()
	require.NoError(t, s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: term, Points: points}))
}

func TestApplyQueryRoundTrip(t *testing.T) {
	_, s := openShard1(t)
	apply(t, s, 1,
		pt("cpu", "host=a,region=eu", "value", 30, 3),
		pt("cpu", "host=a,region=eu", "value", 10, 1),
		pt("cpu", "host=b,region=eu", "value", 10, 5),
		pt("cpu", "host=a,region=eu", "idle", 10, 0.5),
		pt("cpu", "", "value", 10, 9),
		pt("cpuX", "host=a", "value", 10, 7), // shares the prefix, must not leak in
		pt("mem", "host=a", "value", 10, 8),
	)
	apply(t, s, 1,
		pt("cpu", "host=a,region=eu", "value", 20, 2),
		pt("cpu", "host=a,region=eu", "value", 30, 33), // overwrites ts 30
		pt("cpu", "host=a,region=eu", "value", 40, 4),
		pt("cpu", "host=a,region=eu", "value", 40, 44), // same batch: last wins
	)
	require.EqualValues(t, 2, s.LastTxnID())
	require.EqualValues(t, 1, s.LastTerm())

	got, err := s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, []Series{
		{Metric: "cpu", Tags: map[string]string{}, Points: []SeriesPoint{{TS: 10, Value: 9}}},
		{Metric: "cpu", Tags: map[string]string{"host": "a", "region": "eu", FieldTag: "idle"}, Points: []SeriesPoint{{TS: 10, Value: 0.5}}},
		{Metric: "cpu", Tags: map[string]string{"host": "a", "region": "eu"}, Points: []SeriesPoint{{TS: 10, Value: 1}, {TS: 20, Value: 2}, {TS: 30, Value: 33}, {TS: 40, Value: 44}}},
		{Metric: "cpu", Tags: map[string]string{"host": "b", "region": "eu"}, Points: []SeriesPoint{{TS: 10, Value: 5}}},
	}, got)

	got, err = s.Query("cpu", map[string]string{"host": "a"}, 15, 30)
	require.NoError(t, err)
	require.Len(t, got, 1, "idle has no point in range, so only the value series")
	require.Equal(t, []SeriesPoint{{TS: 20, Value: 2}, {TS: 30, Value: 33}}, got[0].Points)

	got, err = s.Query("cpu", map[string]string{FieldTag: "idle"}, 0, 100)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "idle", got[0].Tags[FieldTag])

	got, err = s.Query("cpu", map[string]string{"host": "zz"}, 0, 100)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = s.Query("nope", nil, 0, 100)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = s.Query("cpu", nil, 100, 0)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestQueryNegativeTimestampsAndEscapes(t *testing.T) {
	_, s := openShard1(t)
	apply(t, s, 1,
		pt("a,b#c", "k=v=w", "value", -5, 1),
		pt("a,b#c", "k=v=w", "value", 5, 2),
		pt("a,b#c", "k=v=w", "value", -1<<62, 3),
	)
	got, err := s.Query("a,b#c", map[string]string{"k": "v=w"}, -10, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "a,b#c", got[0].Metric)
	require.Equal(t, []SeriesPoint{{TS: -5, Value: 1}, {TS: 5, Value: 2}}, got[0].Points)
}

func TestApplyTxnGapAndTermRegress(t *testing.T) {
	_, s := openShard1(t)
	err := s.Apply(Entry{TxnID: 2, Term: 1})
	require.ErrorIs(t, err, ErrTxnGap)
	require.NoError(t, s.Apply(Entry{TxnID: 1, Term: 3, Points: []lineproto.Point{pt("m", "", "value", 1, 1)}}))
	require.ErrorIs(t, s.Apply(Entry{TxnID: 1, Term: 3}), ErrTxnGap)
	require.ErrorIs(t, s.Apply(Entry{TxnID: 3, Term: 3}), ErrTxnGap)
	require.ErrorIs(t, s.Apply(Entry{TxnID: 2, Term: 2}), ErrTermRegress)
	require.EqualValues(t, 1, s.LastTxnID())
	require.NoError(t, s.Apply(Entry{TxnID: 2, Term: 4})) // empty entries are legal
	require.EqualValues(t, 4, s.LastTerm())
}

func TestEntriesPagingAndCompaction(t *testing.T) {
	_, s := openShard1(t, WithRetainEntries(5))
	term, err := s.TermAt(0)
	require.NoError(t, err)
	require.Zero(t, term)
	es, err := s.Entries(0, 10)
	require.NoError(t, err)
	require.Empty(t, es)

	for i := 1; i <= 12; i++ {
		apply(t, s, uint64(i), pt("m", "h=a", "value", int64(i), float64(i)))
	}
	settle(t, s) // txn 12 froze 7-11: the log is trimmed once they are flushed
	// Log holds (7, 12]: 7 is the newest trimmed entry, its term still known.
	_, err = s.Entries(0, 10)
	require.ErrorIs(t, err, ErrCompacted)
	_, err = s.Entries(6, 10)
	require.ErrorIs(t, err, ErrCompacted)

	es, err = s.Entries(7, 2)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.EqualValues(t, 8, es[0].TxnID)
	require.EqualValues(t, 9, es[1].TxnID)
	require.Equal(t, []lineproto.Point{pt("m", "h=a", "value", 8, 8)}, es[0].Points)

	es, err = s.Entries(9, 0)
	require.NoError(t, err)
	require.Len(t, es, 3)
	require.EqualValues(t, 12, es[2].TxnID)
	es, err = s.Entries(12, 5)
	require.NoError(t, err)
	require.Empty(t, es)

	term, err = s.TermAt(7)
	require.NoError(t, err)
	require.EqualValues(t, 7, term)
	term, err = s.TermAt(10)
	require.NoError(t, err)
	require.EqualValues(t, 10, term)
	_, err = s.TermAt(6)
	require.ErrorIs(t, err, ErrCompacted)
	term, err = s.TermAt(0)
	require.NoError(t, err)
	require.Zero(t, term, "txn 0 has term 0 even once the log is trimmed")
	_, err = s.TermAt(13)
	require.ErrorIs(t, err, ErrNoEntry)

	// Trimming the log never drops points.
	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 12)
}

func TestTruncateAfterRemovesDivergentTail(t *testing.T) {
	_, s := openShard1(t)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=a", "value", 2, 2))
	apply(t, s, 2, pt("m", "h=a", "value", 1, 10), pt("m", "h=b", "value", 1, 5)) // overwrite + new series
	apply(t, s, 3,
		pt("m", "h=a", "value", 3, 3),
		pt("m", "h=a", "value", 2, 20), pt("m", "h=a", "value", 2, 21), // double overwrite in one batch
	)
	require.NoError(t, s.TruncateAfter(1))
	require.EqualValues(t, 1, s.LastTxnID())
	require.EqualValues(t, 1, s.LastTerm())

	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, []Series{{Metric: "m", Tags: map[string]string{"h": "a"}, Points: []SeriesPoint{{TS: 1, Value: 1}, {TS: 2, Value: 2}}}}, got)
	es, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Len(t, es, 1)
	_, err = s.TermAt(2)
	require.ErrorIs(t, err, ErrNoEntry)

	// The new leader's entries take the freed txn ids.
	apply(t, s, 4, pt("m", "h=c", "value", 1, 7))
	require.EqualValues(t, 2, s.LastTxnID())
	require.NoError(t, s.TruncateAfter(5), "truncating past the end is a no-op")
	require.EqualValues(t, 2, s.LastTxnID())

	require.NoError(t, s.TruncateAfter(0))
	got, err = s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Zero(t, s.LastTerm())
}

func TestTruncateBelowLogIsCompacted(t *testing.T) {
	_, s := openShard1(t, WithRetainEntries(2))
	for i := 1; i <= 5; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	settle(t, s) // txn 4 froze 1-3: the log is trimmed once they are flushed
	require.ErrorIs(t, s.TruncateAfter(2), ErrCompacted)
	require.NoError(t, s.TruncateAfter(3), "3 is the newest trimmed entry: still a known point")
	require.EqualValues(t, 3, s.LastTxnID())
	got, err := s.Query("m", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 3)
}

func fill(t testing.TB, s Shard) {
	for i := 1; i <= 20; i++ {
		apply(t, s, uint64(1+i/10),
			pt("cpu", fmt.Sprintf("host=h%d", i%3), "value", int64(i), float64(i)),
			pt("cpu", fmt.Sprintf("host=h%d", i%3), "idle", int64(i), float64(-i)))
	}
}

func TestSnapshotRestore(t *testing.T) {
	e, src := openShard1(t)
	fill(t, src)
	var snap bytes.Buffer
	require.NoError(t, src.Snapshot(&snap))

	dst, err := e.Open("db2", 3)
	require.NoError(t, err)
	apply(t, dst, 9, pt("other", "", "value", 1, 1)) // replaced wholesale
	require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))

	require.Equal(t, src.LastTxnID(), dst.LastTxnID())
	require.Equal(t, src.LastTerm(), dst.LastTerm())
	want, err := src.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	got, err := dst.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Len(t, got, 6)
	other, err := dst.Query("other", nil, 0, 100)
	require.NoError(t, err)
	require.Empty(t, other)
	wantLog, err := src.Entries(0, 0)
	require.NoError(t, err)
	gotLog, err := dst.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, wantLog, gotLog)
	apply(t, dst, 3, pt("cpu", "host=h0", "value", 50, 1)) // the log continues after a restore
	require.EqualValues(t, 21, dst.LastTxnID())
}

func TestRestoreGarbageKeepsShard(t *testing.T) {
	_, s := openShard1(t)
	fill(t, s)
	err := s.Restore(bytes.NewReader(bytes.Repeat([]byte("not bolt"), 2000)))
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.EqualValues(t, 20, s.LastTxnID())
	got, err := s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Len(t, got, 6)
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir, WithRetainEntries(8))
	s, err := e.Open("db1", 7)
	require.NoError(t, err)
	fill(t, s)
	want, err := s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	wantLog, err := s.Entries(12, 0)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	_, err = e.Open("db1", 7)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Apply(Entry{TxnID: 21}), ErrClosed)
	_, err = s.Query("cpu", nil, 0, 100)
	require.ErrorIs(t, err, ErrClosed)

	s2, err := newEngine(t, dir).Open("db1", 7)
	require.NoError(t, err)
	require.EqualValues(t, 20, s2.LastTxnID())
	require.EqualValues(t, 3, s2.LastTerm())
	got, err := s2.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, want, got)
	gotLog, err := s2.Entries(12, 0)
	require.NoError(t, err)
	require.Equal(t, wantLog, gotLog)
	_, err = s2.Entries(11, 0)
	require.ErrorIs(t, err, ErrCompacted, "retention of the first open persists in the file")
}

func TestOpenIdempotentCloseAndDrop(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir)
	a, err := e.Open("db1", 1)
	require.NoError(t, err)
	b, err := e.Open("db1", 1)
	require.NoError(t, err)
	require.Same(t, a, b)
	apply(t, a, 1, pt("m", "", "value", 1, 1))

	// A shard closed by its owner is reopened from disk by the next Open.
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Close(), ErrClosed)
	c, err := e.Open("db1", 1)
	require.NoError(t, err)
	require.NotSame(t, a, c)
	require.EqualValues(t, 1, c.LastTxnID())

	path := filepath.Join(dir, "db1", "1.db")
	require.FileExists(t, path)
	require.NoError(t, e.Drop("db1", 1))
	require.NoFileExists(t, path)
	require.ErrorIs(t, c.Apply(Entry{TxnID: 2}), ErrClosed)
	require.NoError(t, e.Drop("db1", 1), "dropping a missing shard is a no-op")
	d, err := e.Open("db1", 1)
	require.NoError(t, err)
	require.Zero(t, d.LastTxnID())

	for _, bad := range []struct {
		db    string
		shard int
	}{{"", 0}, {"../x", 0}, {"a/b", 0}, {"ok", -1}} {
		_, err := e.Open(bad.db, bad.shard)
		require.ErrorIs(t, err, ErrBadName)
		require.ErrorIs(t, e.Drop(bad.db, bad.shard), ErrBadName)
	}
}

func TestConcurrentReadersWhileWriting(t *testing.T) {
	_, s := openShard1(t)
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			e := Entry{TxnID: uint64(i), Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", int64(i), 1)}}
			if err := s.Apply(e); err != nil {
				errs <- err
				return
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for {
				// Every applied entry added one point, so a query started after
				// reading LastTxnID must see at least that many.
				last := s.LastTxnID()
				got, err := s.Query("m", nil, 0, n)
				if err == nil && last > 0 && (len(got) != 1 || uint64(len(got[0].Points)) < last) {
					err = fmt.Errorf("saw %d series after txn %d", len(got), last)
				}
				if err == nil {
					_, err = s.Entries(s.LastTxnID(), 5)
				}
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, n, s.LastTxnID())
}

func TestSeriesPointJSON(t *testing.T) {
	b, err := json.Marshal(Series{Metric: "m", Tags: map[string]string{"h": "a"}, Points: []SeriesPoint{{TS: 1, Value: 0.5}, {TS: -2, Value: 3}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"metric":"m","tags":{"h":"a"},"points":[[1,0.5],[-2,3]]}`, string(b))
	var back Series
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 0.5}, {TS: -2, Value: 3}}, back.Points)

	var p SeriesPoint
	require.Error(t, json.Unmarshal([]byte(`[1]`), &p))
	require.Error(t, json.Unmarshal([]byte(`[1.5,2]`), &p))
	require.NoError(t, json.Unmarshal([]byte(`[7,null]`), &p))
	require.EqualValues(t, 7, p.TS)
	require.True(t, p.Value != p.Value, "null reads as NaN")
	b, err = json.Marshal(p)
	require.NoError(t, err)
	require.Equal(t, `[7,null]`, string(b))
}

// TestMain lets TestKill9Durability re-run this binary as the writer it kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("CAIRN_ENGINE_CRASH_DIR"); dir != "" {
		if shards, err := strconv.Atoi(os.Getenv("CAIRN_ENGINE_CRASH_SHARDS")); err == nil {
			crashShardsWriter(dir, shards)
			return
		}
		flushPoints, err := strconv.Atoi(os.Getenv("CAIRN_ENGINE_CRASH_FLUSH"))
		if err != nil {
			flushPoints = DefaultFlushPoints
		}
		writers, err := strconv.Atoi(os.Getenv("CAIRN_ENGINE_CRASH_WRITERS"))
		if err != nil {
			writers = 1
		}
		crashWriter(dir, flushPoints, writers)
		return
	}
	os.Exit(m.Run())
}
