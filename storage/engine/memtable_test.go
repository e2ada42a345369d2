package engine

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// manual keeps flushes under the test's control.
var manual = []Option{WithFlushPoints(1 << 30), WithFlushInterval(0), WithCompactRate(0)}

func flushNow(t testing.TB, s Shard) {
	t.Helper()
	bs := s.(*boltShard)
	bs.wmu.Lock()
	defer bs.wmu.Unlock()
	require.NoError(t, bs.flushLocked())
}

// settle ends the background flush of a frozen memtable: it waits for the
// one under way, or does it.
func settle(t testing.TB, s Shard) {
	t.Helper()
	require.NoError(t, s.(*boltShard).flushFrozen())
}

func flushedTxn(s Shard) uint64 { return s.(*boltShard).flushedTxn.Load() }

func TestQueryMergesMemtableAndFlushed(t *testing.T) {
	_, s := openShard1(t, manual...)
	apply(t, s, 1,
		pt("cpu", "host=a", "value", 10, 1), pt("cpu", "host=a", "value", 20, 2),
		pt("cpu", "host=b", "value", 10, 5), pt("cpu", "", "value", 10, 9))
	flushNow(t, s)
	require.EqualValues(t, 1, flushedTxn(s))
	apply(t, s, 1,
		pt("cpu", "host=a", "value", 20, 22),  // overwrites a flushed point
		pt("cpu", "host=a", "value", 15, 1.5), // lands between flushed points
		pt("cpu", "host=a", "value", 30, 3),
		pt("cpu", "host=c", "value", 10, 7), // a series only in the memtable
		pt("cpu", "host=a", "idle", 10, 0.5))
	require.EqualValues(t, 1, flushedTxn(s), "below the thresholds nothing flushes")

	want := []Series{
		{Metric: "cpu", Tags: map[string]string{}, Points: []SeriesPoint{{TS: 10, Value: 9}}},
		{Metric: "cpu", Tags: map[string]string{"host": "a", FieldTag: "idle"}, Points: []SeriesPoint{{TS: 10, Value: 0.5}}},
		{Metric: "cpu", Tags: map[string]string{"host": "a"}, Points: []SeriesPoint{{TS: 10, Value: 1}, {TS: 15, Value: 1.5}, {TS: 20, Value: 22}, {TS: 30, Value: 3}}},
		{Metric: "cpu", Tags: map[string]string{"host": "b"}, Points: []SeriesPoint{{TS: 10, Value: 5}}},
		{Metric: "cpu", Tags: map[string]string{"host": "c"}, Points: []SeriesPoint{{TS: 10, Value: 7}}},
	}
	got, err := s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, want, got)

	got, err = s.Query("cpu", map[string]string{"host": "a"}, 12, 25)
	require.NoError(t, err)
	require.Equal(t, []Series{{Metric: "cpu", Tags: map[string]string{"host": "a"}, Points: []SeriesPoint{{TS: 15, Value: 1.5}, {TS: 20, Value: 22}}}}, got)
	got, err = s.Query("cpu", map[string]string{"host": "c"}, 11, 100)
	require.NoError(t, err)
	require.Empty(t, got, "a memtable series with no point in range is left out")

	// The same answers once everything is flushed, and after a reopen.
	flushNow(t, s)
	require.EqualValues(t, 2, flushedTxn(s))
	got, err = s.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestSizeAndRetentionTriggerFlush(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(3), WithFlushInterval(0), WithRetainEntries(100))
	apply(t, s, 1, pt("m", "", "value", 1, 1), pt("m", "", "value", 2, 1))
	apply(t, s, 1, pt("m", "", "value", 2, 5)) // an overwrite adds no point
	require.Zero(t, flushedTxn(s))
	apply(t, s, 1, pt("m", "", "value", 3, 1))
	require.Zero(t, flushedTxn(s))
	apply(t, s, 1, pt("m", "", "value", 4, 1)) // the memtable held 3 points
	settle(t, s)
	require.EqualValues(t, 3, flushedTxn(s))

	_, s = openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithRetainEntries(3))
	for i := 1; i <= 4; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	// Keeping 3 entries after txn 4 means trimming txn 1, which must be flushed first.
	settle(t, s)
	require.EqualValues(t, 3, flushedTxn(s))
	_, err := s.Entries(0, 0)
	require.ErrorIs(t, err, ErrCompacted)
	es, err := s.Entries(1, 0)
	require.NoError(t, err)
	require.Len(t, es, 3)
}

func TestIntervalFlushEmptiesIdleMemtable(t *testing.T) {
	_, s := openShard1(t, WithFlushInterval(20*time.Millisecond))
	apply(t, s, 1, pt("m", "", "value", 1, 1))
	apply(t, s, 1, pt("m", "", "value", 2, 2))
	require.Eventually(t, func() bool { return flushedTxn(s) == 2 }, 5*time.Second, 5*time.Millisecond)
	got, err := s.Query("m", nil, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 1}, {TS: 2, Value: 2}}, got[0].Points)
}

// TestIntervalFlushSleepsWhileEmpty: once the age-based flush has emptied
// the memtable, the flusher's age check stops ticking; the next commit
// wakes it, and its points are flushed by age again.
func TestIntervalFlushSleepsWhileEmpty(t *testing.T) {
	_, s := openShard1(t, WithFlushInterval(20*time.Millisecond))
	bs := s.(*boltShard)
	for txn := uint64(1); txn <= 3; txn++ {
		apply(t, s, 1, pt("m", "", "value", int64(txn), float64(txn)))
		require.Eventually(t, func() bool { return flushedTxn(s) == txn }, 5*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return !bs.ageTicking.Load() }, 5*time.Second, 5*time.Millisecond,
			"the age check still ticks over an empty memtable")
	}
	got, err := s.Query("m", nil, 0, 10)
	require.NoError(t, err)
	require.Len(t, got[0].Points, 3)
}

func TestTruncateAcrossFlushBoundary(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=a", "value", 2, 2))
	apply(t, s, 2, pt("m", "h=a", "value", 1, 10), pt("m", "h=b", "value", 1, 5))
	apply(t, s, 2, pt("m", "h=a", "value", 2, 20), pt("m", "h=a", "value", 2, 21), pt("m", "h=a", "value", 0, 0.5))
	flushNow(t, s) // 1..3 flushed
	apply(t, s, 3, pt("m", "h=a", "value", 1, 100), pt("m", "h=c", "value", 1, 7))
	apply(t, s, 3, pt("m", "h=a", "value", 1, 101), pt("m", "h=a", "value", 3, 3))
	apply(t, s, 4, pt("m", "h=b", "value", 1, 50))
	require.EqualValues(t, 3, flushedTxn(s))

	query := func() []Series {
		got, err := s.Query("m", nil, -10, 100)
		require.NoError(t, err)
		return got
	}
	series := func(host string, pts ...SeriesPoint) Series {
		return Series{Metric: "m", Tags: map[string]string{"h": host}, Points: pts}
	}

	// Only unflushed entries go.
	require.NoError(t, s.TruncateAfter(5))
	require.EqualValues(t, 5, s.LastTxnID())
	require.EqualValues(t, 3, s.LastTerm())
	require.Equal(t, []Series{
		series("a", SeriesPoint{TS: 0, Value: 0.5}, SeriesPoint{TS: 1, Value: 101}, SeriesPoint{TS: 2, Value: 21}, SeriesPoint{TS: 3, Value: 3}),
		series("b", SeriesPoint{TS: 1, Value: 5}),
		series("c", SeriesPoint{TS: 1, Value: 7}),
	}, query())

	// Across the boundary: unflushed 4..5 are dropped, flushed 3 is undone.
	require.NoError(t, s.TruncateAfter(2))
	require.EqualValues(t, 2, s.LastTxnID())
	require.EqualValues(t, 2, s.LastTerm())
	require.EqualValues(t, 2, flushedTxn(s))
	wantAt2 := []Series{series("a", SeriesPoint{TS: 1, Value: 10}, SeriesPoint{TS: 2, Value: 2}), series("b", SeriesPoint{TS: 1, Value: 5})}
	require.Equal(t, wantAt2, query())
	es, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
	_, err = s.TermAt(3)
	require.ErrorIs(t, err, ErrNoEntry)

	// New entries take the freed ids; a truncation inside the memtable that
	// leaves some of it restores overwritten memtable values too.
	apply(t, s, 5, pt("m", "h=a", "value", 1, 11))
	apply(t, s, 5, pt("m", "h=a", "value", 1, 12))
	require.NoError(t, s.TruncateAfter(3))
	require.Equal(t, []Series{series("a", SeriesPoint{TS: 1, Value: 11}, SeriesPoint{TS: 2, Value: 2}), series("b", SeriesPoint{TS: 1, Value: 5})}, query())

	// All of it survives a reopen (the memtable is rebuilt from the log).
	require.NoError(t, s.Close())
	require.NoError(t, e.Close()) // one engine per data dir at a time: it holds the log
	s, err = newEngine(t, dir, manual...).Open("db1", 0)
	require.NoError(t, err)
	require.EqualValues(t, 3, s.LastTxnID())
	require.EqualValues(t, 5, s.LastTerm())
	require.EqualValues(t, 2, flushedTxn(s))
	require.Equal(t, []Series{series("a", SeriesPoint{TS: 1, Value: 11}, SeriesPoint{TS: 2, Value: 2}), series("b", SeriesPoint{TS: 1, Value: 5})}, query())
	require.NoError(t, s.TruncateAfter(0))
	require.Empty(t, query())
}

func TestSnapshotRestoreWithUnflushedMemtable(t *testing.T) {
	e, src := openShard1(t, manual...)
	fill(t, src)
	flushNow(t, src)
	apply(t, src, 3, pt("cpu", "host=h1", "value", 1, 1000), pt("cpu", "host=new", "value", 5, 5))
	require.EqualValues(t, 20, flushedTxn(src))
	var snap bytes.Buffer
	require.NoError(t, src.Snapshot(&snap))

	dst, err := e.Open("db2", 1)
	require.NoError(t, err)
	apply(t, dst, 9, pt("cpu", "host=stale", "value", 1, 1)) // unflushed, must vanish
	require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))
	require.EqualValues(t, 21, dst.LastTxnID())
	require.EqualValues(t, 20, flushedTxn(dst))
	want, err := src.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	got, err := dst.Query("cpu", nil, 0, 100)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Len(t, got, 7)

	// The restored memtable flushes and truncates like any other.
	apply(t, dst, 3, pt("cpu", "host=h1", "value", 1, 2000))
	require.NoError(t, dst.TruncateAfter(20))
	flushNow(t, dst)
	got, err = dst.Query("cpu", map[string]string{"host": "h1", FieldTag: DefaultField}, 1, 1)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 1, Value: 1}}, got[0].Points, "back to the value before txn 21")
}

// TestRandomAgainstModel drives a shard with random batches (overwrites,
// out-of-order points, duplicates in a batch), flushes, truncations and
// reopens, and checks every query against a replay of the surviving entries.
func TestRandomAgainstModel(t *testing.T) {
	// Timestamps drawn from a small window overwrite each other all the
	// time; mostly increasing ones are the usual case, where the memtable
	// keeps undo only for the few points at or before a series' newest
	// flushed one.
	t.Run("overwrites", func(t *testing.T) {
		randomAgainstModel(t, func(rng *rand.Rand, _ int) int64 { return int64(rng.IntN(30)) })
	})
	t.Run("increasing", func(t *testing.T) {
		randomAgainstModel(t, func(rng *rand.Rand, step int) int64 {
			if rng.IntN(10) == 0 {
				return int64(step - rng.IntN(40))
			}
			return int64(step + rng.IntN(3))
		})
	})
}

func randomAgainstModel(t *testing.T, tsOf func(rng *rand.Rand, step int) int64, extra ...Option) {
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	opts := append([]Option{WithFlushPoints(40), WithFlushInterval(0), WithRetainEntries(30), WithCompactRate(0)}, extra...)
	e, s := openShardAt(t, dir, opts...)
	var log []Entry // every surviving entry, log[i].TxnID == i+1
	hosts := []string{"a", "b", "c", "d"}
	for step := range 400 {
		switch r := rng.IntN(20); {
		case r == 0:
			flushNow(t, s)
		case r == 1 && len(log) > 0:
			to := uint64(rng.IntN(min(len(log), 8)) + len(log) - min(len(log), 8))
			err := s.TruncateAfter(to)
			if errors.Is(err, ErrCompacted) {
				continue
			}
			require.NoError(t, err, "step %d", step)
			log = log[:to]
		case r == 3:
			require.NoError(t, s.(Compacter).Compact())
		case r == 2:
			require.NoError(t, s.Close())
			require.NoError(t, e.Close())
			e, s = openShardAt(t, dir, opts...)
		default:
			points := make([]lineproto.Point, rng.IntN(12))
			for i := range points {
				points[i] = pt("m", "h="+hosts[rng.IntN(len(hosts))], "value", tsOf(rng, step), float64(step*100+i))
			}
			e := Entry{TxnID: uint64(len(log) + 1), Term: 1, Points: points}
			require.NoError(t, s.Apply(e))
			log = append(log, e)
		}
		require.EqualValues(t, len(log), s.LastTxnID())
		want := modelQuery(log)
		got, err := s.Query("m", nil, -100, 1000)
		require.NoError(t, err)
		require.Equal(t, want, got, "step %d", step)
	}
}

func modelQuery(log []Entry) []Series {
	state := map[string]map[int64]float64{}
	for _, e := range log {
		for _, p := range e.Points {
			h := p.Tags[0].Value
			if state[h] == nil {
				state[h] = map[int64]float64{}
			}
			state[h][p.TS] = p.Value
		}
	}
	var out []Series
	for _, h := range slices.Sorted(maps.Keys(state)) {
		sr := Series{Metric: "m", Tags: map[string]string{"h": h}}
		for _, ts := range slices.Sorted(maps.Keys(state[h])) {
			sr.Points = append(sr.Points, SeriesPoint{TS: ts, Value: state[h][ts]})
		}
		out = append(out, sr)
	}
	return out
}

// TestMemoryBudgetFlushes: once the active memtables of the engine together
// pass the budget, a shard holding a fair share of it freezes its memtable
// before its next entry, for a flush beside its next commits: the budget's
// account drops by what it held, which is held as frozen until the flush
// ends. A shard holds one frozen memtable at most.
func TestMemoryBudgetFlushes(t *testing.T) {
	const budget = 64 << 10
	e := newEngine(t, t.TempDir(), WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0), WithMemtableBytes(budget))
	a, err := e.Open("db1", 0)
	require.NoError(t, err)
	b, err := e.Open("db1", 1)
	require.NoError(t, err)
	acct := a.(*boltShard).memAcct
	batch := func(n int) []lineproto.Point {
		pts := make([]lineproto.Point, 100)
		for i := range pts {
			pts[i] = pt("m", "h=x", "value", int64(n*100+i), 1)
		}
		return pts
	}
	apply(t, b, 1, batch(0)...)
	batchBytes := int64(100*(memPointBytes+memUndoBytes) + memSeriesBytes + memFreshBytes + 64)
	for n := 0; flushedTxn(a) == 0; n++ {
		require.Less(t, n, 1000, "the budget never flushed")
		total, _ := acct.load()
		require.LessOrEqual(t, total, int64(budget)+batchBytes, "never more than one batch over the budget")
		require.LessOrEqual(t, acct.frozen.Load(), int64(budget)+batchBytes, "one frozen memtable")
		apply(t, a, 1, batch(n)...)
	}
	settle(t, a)
	require.Zero(t, acct.frozen.Load(), "the flushed memtable is no longer charged")
	total, shards := acct.load()
	require.EqualValues(t, 2, shards)
	require.Less(t, total, int64(budget))
	require.Zero(t, flushedTxn(b), "the shard with a small memtable did not flush")
	require.NoError(t, b.Close())
	_, shards = acct.load()
	require.EqualValues(t, 1, shards)
}

// TestLogBoundedByBytes: flushed entries beyond the byte bound are trimmed,
// and a follower asking for them is told to do a full sync.
func TestLogBoundedByBytes(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(1<<30), WithFlushInterval(0), WithCompactRate(0), WithRetainBytes(1))
	for i := 1; i <= 5; i++ {
		apply(t, s, 1, pt("m", "", "value", int64(i), 1))
	}
	_, err := s.Entries(0, 0)
	require.NoError(t, err, "nothing flushed, nothing trimmed")
	flushNow(t, s)
	apply(t, s, 1, pt("m", "", "value", 6, 1))
	_, err = s.Entries(4, 0)
	require.ErrorIs(t, err, ErrCompacted)
	es, err := s.Entries(5, 0)
	require.NoError(t, err)
	require.Len(t, es, 1, "only the unflushed entry stays")
}

// TestSeriesHintWrongGuesses: seriesOf first tries the series that followed
// the previous one last time. Batches in the same order as the last (every
// guess right), shuffled, with neighbours swapped or with a series replaced
// by another, possibly new one (guesses wrong) all put every point in its own
// series, each series held once, and the guesses follow the latest order.
func TestSeriesHintWrongGuesses(t *testing.T) {
	ix := newSeriesIndex()
	mt := newMemtable(ix)
	rng := rand.New(rand.NewPCG(3, 4))
	hosts := make([]string, 40)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d", i)
	}
	order := slices.Clone(hosts[:20])
	model := map[string][]SeriesPoint{}
	for ts := range int64(300) {
		switch rng.IntN(4) {
		case 0:
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		case 1:
			i := rng.IntN(len(order) - 1)
			order[i], order[i+1] = order[i+1], order[i]
		case 2: // may repeat a series within the batch: the later point wins
			order[rng.IntN(len(order))] = hosts[rng.IntN(len(hosts))]
		}
		points := make([]lineproto.Point, len(order))
		for i, h := range order {
			points[i] = pt("m", "h="+h, "value", ts, float64(ts*100+int64(i)))
			key := "m,h=" + h + "#value"
			if n := len(model[key]); n > 0 && model[key][n-1].TS == ts {
				model[key][n-1].Value = points[i].Value
			} else {
				model[key] = append(model[key], SeriesPoint{TS: ts, Value: points[i].Value})
			}
		}
		mt.insert(Entry{TxnID: uint64(ts + 1), Term: 1, Points: points}, nil, time.Time{})
	}
	require.Len(t, mt.series, len(model), "each series held once")
	for i, ms := range mt.series {
		require.EqualValues(t, i, mt.fresh[ms.key])
	}
	hits, err := mt.collect("m", nil, 0, 1000, Limits{})
	require.NoError(t, err)
	got := map[string][]SeriesPoint{}
	for _, h := range hits {
		got[h.key] = h.points
	}
	require.Equal(t, model, got)
	// The last batch's order is what the next one is guessed from (a series
	// sent twice is followed by what followed it the second time).
	for i := 1; i < len(order); i++ {
		if slices.Index(order[i:], order[i-1]) >= 0 {
			continue
		}
		before := mt.series[mt.fresh["m,h="+order[i-1]+"#value"]]
		require.EqualValues(t, mt.fresh["m,h="+order[i]+"#value"]+1, before.next, "after %s", order[i-1])
	}
}

// TestArenaSeriesOutgrowTheirRoom: new series take their first points from
// one shared allocation; a series that outgrows its room moves out without
// touching its neighbours' points.
func TestArenaSeriesOutgrowTheirRoom(t *testing.T) {
	ix := newSeriesIndex()
	mt := newMemtable(ix)
	mt.ptsHint = 3
	want := map[string][]SeriesPoint{}
	for ts := range int64(10) {
		var points []lineproto.Point
		for h := range 5 {
			// Series h gets h+1 points per round: series 0 fills its room
			// exactly in three rounds, the others overflow it sooner.
			for k := range h + 1 {
				p := pt("m", fmt.Sprintf("h=%d", h), "value", ts*10+int64(k), float64(h*1000)+float64(ts*10)+float64(k))
				points = append(points, p)
				key := fmt.Sprintf("m,h=%d#value", h)
				want[key] = append(want[key], SeriesPoint{TS: p.TS, Value: p.Value})
			}
		}
		mt.insert(Entry{TxnID: uint64(ts + 1), Term: 1, Points: points}, nil, time.Time{})
		if ts == 0 {
			require.Equal(t, &mt.arena[0], &mt.series[0].pts[:1][0], "the first series starts in the arena")
		}
	}
	hits, err := mt.collect("m", nil, 0, 1000, Limits{})
	require.NoError(t, err)
	got := map[string][]SeriesPoint{}
	for _, h := range hits {
		got[h.key] = h.points
	}
	require.Equal(t, want, got)
}

// TestNewSeriesKeysSpanChunks: the keys of new series share allocations;
// filling one and starting the next (or a key longer than a whole one) leaves
// every key as it was written.
func TestNewSeriesKeysSpanChunks(t *testing.T) {
	ix := newSeriesIndex()
	mt := newMemtable(ix)
	long := strings.Repeat("x", keyChunkBytes+10)
	var points []lineproto.Point
	var want []string
	for i := range 4000 { // about 80 KiB of keys
		host := fmt.Sprintf("host-%05d", i)
		if i == 1500 {
			host = long
		}
		points = append(points, pt("m", "h="+host, "value", 1, float64(i)))
		want = append(want, "m,h="+host+"#value")
	}
	mt.insert(Entry{TxnID: 1, Term: 1, Points: points}, nil, time.Time{})
	require.Len(t, mt.series, len(want))
	for i, key := range want {
		require.Equal(t, key, mt.series[i].key)
		require.EqualValues(t, i, mt.fresh[key])
	}
}

// A memSeries is one cache line (64 bytes, held in one slice): with many
// series, an in-order point reads just that line before its append (see
// memSeries.last). A field added past it costs every such point a miss.
func TestMemSeriesIsOneCacheLine(t *testing.T) {
	require.EqualValues(t, 64, unsafe.Sizeof(memSeries{}))
}

// TestNewSeriesStartWithLittleRoom: after flushes of series that held many
// points each, a series the shard already has starts the next memtable with
// room for as many, and a series new to the shard with freshRoom at most;
// one that then gets more points keeps them all.
func TestNewSeriesStartWithLittleRoom(t *testing.T) {
	_, s := openShard1(t, manual...)
	const held = 100
	hosts := []string{"a", "b", "c"}
	for round := range int64(2) {
		for _, h := range hosts {
			var points []lineproto.Point
			for ts := range int64(held) {
				points = append(points, pt("cpu", "host="+h, "value", round*held+ts, 1))
			}
			apply(t, s, 1, points...)
		}
		flushNow(t, s)
	}
	apply(t, s, 1, pt("cpu", "host=a", "value", 1000, 1), pt("cpu", "host=new", "value", 1000, 2))
	mt := s.(*boltShard).mems.Load().active
	room := func(key string) int {
		mt.mu.RLock()
		defer mt.mu.RUnlock()
		for _, ms := range mt.series {
			if ms.key == key {
				return cap(ms.pts)
			}
		}
		t.Fatalf("no series %s in the memtable", key)
		return 0
	}
	require.Equal(t, held, room("cpu,host=a#value"), "a series the shard has: the room of the last flush's")
	require.LessOrEqual(t, room("cpu,host=new#value"), freshRoom, "a series new to the shard")

	var want []SeriesPoint
	want = append(want, SeriesPoint{TS: 1000, Value: 2})
	for ts := int64(1001); ts < 1001+3*freshRoom; ts++ {
		apply(t, s, 1, pt("cpu", "host=new", "value", ts, float64(ts)))
		want = append(want, SeriesPoint{TS: ts, Value: float64(ts)})
	}
	got, err := s.Query("cpu", map[string]string{"host": "new"}, 0, 1<<20)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, want, got[0].Points)
}
