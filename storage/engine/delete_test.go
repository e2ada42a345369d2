package engine

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

func del(t testing.TB, s Shard, term uint64, d wire.Delete) {
	t.Helper()
	require.NoError(t, s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: term, Delete: &d}))
}

func hostA(lo, hi int64) wire.Delete {
	return wire.Delete{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "a"}}, Min: lo, Max: hi}
}

// writeHosts writes cpu,host=a and host=b value (and idle for a) at ts
// from..to, one entry per ts.
func writeHosts(t testing.TB, s Shard, from, to int64) {
	t.Helper()
	for ts := from; ts <= to; ts++ {
		apply(t, s, 1, pt("cpu", "host=a", "value", ts, float64(ts)), pt("cpu", "host=a", "idle", ts, 1),
			pt("cpu", "host=b", "value", ts, float64(ts)))
	}
}

// seen is every point of cpu as "host/field@ts=value", through Query and,
// checked to agree, through Scan.
func seen(t testing.TB, s Shard) []string {
	t.Helper()
	got, err := s.Query("cpu", nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	var out []string
	for _, sr := range got {
		for _, p := range sr.Points {
			out = append(out, fmt.Sprintf("%s/%s@%d=%g", sr.Tags["host"], sr.Tags[FieldTag], p.TS, p.Value))
		}
	}
	var scanned []string
	err = s.(Scanner).Scan("cpu", nil, math.MinInt64, math.MaxInt64, func(string) bool { return true }, func(key string, pts []SeriesPoint) error {
		sr, _, err := matchSeries(key, nil)
		for _, p := range pts {
			scanned = append(scanned, fmt.Sprintf("%s/%s@%d=%g", sr.Tags["host"], sr.Tags[FieldTag], p.TS, p.Value))
		}
		return err
	})
	require.NoError(t, err)
	require.ElementsMatch(t, out, scanned, "Query and Scan agree")
	return out
}

// expected lists what writeHosts(1, n) leaves after deleting host a's
// points in [lo, hi], with host a rewritten at the ts of rewrote (value
// 100+ts, after the delete).
func expected(n, lo, hi int64, rewrote ...int64) []string {
	var out []string
	for ts := int64(1); ts <= n; ts++ {
		out = append(out, fmt.Sprintf("b/@%d=%d", ts, ts))
		switch {
		case ts < lo || ts > hi:
			out = append(out, fmt.Sprintf("a/@%d=%d", ts, ts), fmt.Sprintf("a/idle@%d=1", ts))
		case bytes.Contains(fmt.Appendf(nil, "%v", rewrote), fmt.Appendf(nil, "%d", ts)):
			out = append(out, fmt.Sprintf("a/@%d=%d", ts, 100+ts))
		}
	}
	return out
}

// TestDeleteAppliesInLogOrder: points written before a delete are gone and
// those written after it stay, wherever they are (blocks, the memtable, a
// frozen memtable being flushed), across the flush and a restart that
// replays the delete from the log.
func TestDeleteAppliesInLogOrder(t *testing.T) {
	for _, c := range []struct {
		name      string
		flushedTo int64 // the points up to this ts are in blocks before the delete
		freeze    bool  // the rest is in the frozen memtable when the delete comes
	}{
		{"all in blocks", 10, false},
		{"half in blocks, half in the memtable", 5, false},
		{"all in the memtable", 0, false},
		{"half in blocks, half in a frozen memtable", 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			e, s := openShardAt(t, dir, manual...)
			writeHosts(t, s, 1, c.flushedTo)
			flushNow(t, s)
			writeHosts(t, s, c.flushedTo+1, 10)
			if c.freeze {
				freezeNow(s)
			}
			del(t, s, 1, hostA(3, 7))
			apply(t, s, 1, pt("cpu", "host=a", "value", 4, 104), pt("cpu", "host=a", "value", 6, 106))
			want := expected(10, 3, 7, 4, 6)
			require.ElementsMatch(t, want, seen(t, s), "at once")
			settle(t, s)
			require.ElementsMatch(t, want, seen(t, s), "after the frozen memtable's flush")
			require.NoError(t, s.Close())
			require.NoError(t, e.Close())

			e, s = openShardAt(t, dir, manual...)
			require.ElementsMatch(t, want, seen(t, s), "after a restart (the delete replayed from the log)")
			flushNow(t, s)
			require.ElementsMatch(t, want, seen(t, s), "after the flush")
			require.NoError(t, s.Close())
			require.NoError(t, e.Close())
			_, s = openShardAt(t, dir, manual...)
			require.ElementsMatch(t, want, seen(t, s), "after a restart with the delete in blocks")
		})
	}
}

// freezeNow freezes the active memtable without flushing it.
func freezeNow(s Shard) {
	bs := s.(*boltShard)
	bs.wmu.Lock()
	defer bs.wmu.Unlock()
	bs.fmu.Lock()
	defer bs.fmu.Unlock()
	bs.freeze()
}

// TestDeleteWholeMeasurementAndSeries: a delete of all time (DROP
// MEASUREMENT, DROP SERIES) leaves no point of what it names, and other
// measurements alone; the emptied blocks are gone from the file.
func TestDeleteWholeMeasurementAndSeries(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHosts(t, s, 1, 10)
	apply(t, s, 1, pt("mem", "host=a", "value", 1, 1))
	flushNow(t, s)
	before := countBlocks(t, s)
	del(t, s, 1, wire.Delete{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "b"}}, Min: math.MinInt64, Max: math.MaxInt64})
	flushNow(t, s)
	require.Equal(t, before-1, countBlocks(t, s), "host b's block")
	require.ElementsMatch(t, filterHost(expected(10, 11, 11), "a"), seen(t, s))
	require.Len(t, seen(t, s), 20)

	del(t, s, 1, wire.Delete{Metric: "cpu", Min: math.MinInt64, Max: math.MaxInt64})
	require.Empty(t, seen(t, s))
	flushNow(t, s)
	require.Empty(t, seen(t, s))
	require.Equal(t, 1, countBlocks(t, s), "mem's block only")
	got, err := s.Query("mem", nil, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func filterHost(pts []string, host string) []string {
	var out []string
	for _, p := range pts {
		if p[:1] == host {
			out = append(out, p)
		}
	}
	return out
}

// TestSnapshotAfterDeleteDoesNotResurrect: a full sync taken after a delete,
// flushed or still in the log tail, carries it.
func TestSnapshotAfterDeleteDoesNotResurrect(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			e, src := openShard1(t, manual...)
			writeHosts(t, src, 1, 10)
			flushNow(t, src)
			del(t, src, 2, hostA(1, 5))
			if flushed {
				flushNow(t, src)
			}
			want := expected(10, 1, 5)
			require.ElementsMatch(t, want, seen(t, src))
			var snap bytes.Buffer
			require.NoError(t, src.Snapshot(&snap))

			dst, err := e.Open("db2", 0)
			require.NoError(t, err)
			writeHosts(t, dst, 1, 3) // replaced wholesale
			require.NoError(t, dst.Restore(bytes.NewReader(snap.Bytes())))
			require.ElementsMatch(t, want, seen(t, dst))
			require.Equal(t, src.LastTxnID(), dst.LastTxnID())
			flushNow(t, dst)
			require.ElementsMatch(t, want, seen(t, dst))
			apply(t, dst, 2, pt("cpu", "host=a", "value", 2, 102))
			require.ElementsMatch(t, expected(10, 1, 5, 2), seen(t, dst))
		})
	}
}

// TestTruncateOverDelete: an unflushed delete cut from the log takes its
// effect with it; past a flushed one the follower needs a full sync.
func TestTruncateOverDelete(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHosts(t, s, 1, 10)
	flushNow(t, s)
	at := s.LastTxnID()
	del(t, s, 2, hostA(1, 10))
	apply(t, s, 2, pt("cpu", "host=b", "value", 11, 11))
	require.NoError(t, s.TruncateAfter(at))
	require.ElementsMatch(t, expected(10, 11, 11), seen(t, s), "the delete is undone with its entry")

	del(t, s, 3, hostA(1, 10))
	apply(t, s, 3, pt("cpu", "host=b", "value", 11, 11))
	flushNow(t, s)
	require.ErrorIs(t, s.TruncateAfter(s.LastTxnID()-1), ErrCompacted, "the entry after the delete, flushed with it")
	require.ErrorIs(t, s.TruncateAfter(at), ErrCompacted)
	require.Len(t, seen(t, s), 11, "a refused truncation changes nothing")
	apply(t, s, 3, pt("cpu", "host=b", "value", 12, 12))
	flushNow(t, s)
	require.NoError(t, s.TruncateAfter(s.LastTxnID()-1), "entries flushed after the delete's flush still roll back")
	require.Len(t, seen(t, s), 11)
}

func TestDeleteRefusesBadEntries(t *testing.T) {
	_, s := openShard1(t, manual...)
	writeHosts(t, s, 1, 2)
	last := s.LastTxnID()
	for _, e := range []Entry{
		{Delete: &wire.Delete{Max: 1}},
		{Delete: &wire.Delete{Metric: "cpu", Min: 2, Max: 1}},
		{Delete: &wire.Delete{Metric: "cpu", Max: 1}, Points: []lineproto.Point{pt("cpu", "", "value", 1, 1)}},
	} {
		e.TxnID, e.Term = last+1, 1
		require.ErrorIs(t, s.Apply(e), ErrBadDelete)
	}
	require.Equal(t, last, s.LastTxnID(), "nothing logged")
	require.Len(t, seen(t, s), 6)
	es, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
}

// TestDeleteEntriesReplicate: the log serves a delete as an entry that a
// follower applies like its leader.
func TestDeleteEntriesReplicate(t *testing.T) {
	e, leader := openShard1(t, manual...)
	writeHosts(t, leader, 1, 10)
	del(t, leader, 1, hostA(2, 4))
	writeHosts(t, leader, 11, 12)
	follower, err := e.Open("db1", 1)
	require.NoError(t, err)
	es, err := leader.Entries(0, 0)
	require.NoError(t, err)
	require.NotNil(t, es[10].Delete)
	for _, x := range es {
		b, err := x.MarshalBinary()
		require.NoError(t, err)
		var back Entry
		require.NoError(t, back.UnmarshalBinary(b))
		require.NoError(t, follower.Apply(back))
	}
	require.ElementsMatch(t, seen(t, leader), seen(t, follower))
	require.ElementsMatch(t, expected(12, 2, 4), seen(t, follower))
}

func keys(t testing.TB, s Shard) []string {
	t.Helper()
	var out []string
	require.NoError(t, s.SeriesKeys(func(k string) error { out = append(out, k); return nil }))
	return out
}

// TestDeletedSeriesLeaveTheKeys: a series a delete leaves no point is no
// longer listed (SHOW): at once for a drop of all time, after the flush for
// a delete of a range that held all its points, across a restart; a write
// brings it back.
func TestDeletedSeriesLeaveTheKeys(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	writeHosts(t, s, 1, 10)
	apply(t, s, 1, pt("mem", "host=a", "value", 1, 1))
	flushNow(t, s)
	all := []string{"cpu,host=a#idle", "cpu,host=a#value", "cpu,host=b#value", "mem,host=a#value"}
	require.ElementsMatch(t, all, keys(t, s))

	del(t, s, 1, wire.Delete{Metric: "mem", Min: math.MinInt64, Max: math.MaxInt64})
	require.ElementsMatch(t, all[:3], keys(t, s), "a drop leaves the keys at once")
	del(t, s, 1, hostA(0, 10))
	require.ElementsMatch(t, all[:3], keys(t, s), "a range delete leaves them at its flush")
	flushNow(t, s)
	require.ElementsMatch(t, all[2:3], keys(t, s))
	require.NoError(t, s.Close())
	require.NoError(t, e.Close())

	e, s = openShardAt(t, dir, manual...)
	require.ElementsMatch(t, all[2:3], keys(t, s), "after a restart")
	apply(t, s, 1, pt("mem", "host=a", "value", 2, 2))
	require.ElementsMatch(t, []string{all[2], all[3]}, keys(t, s), "a write brings it back")
	flushNow(t, s)
	require.ElementsMatch(t, []string{all[2], all[3]}, keys(t, s))
	// Deleted and written again in one flush: listed.
	del(t, s, 1, wire.Delete{Metric: "mem", Min: math.MinInt64, Max: math.MaxInt64})
	apply(t, s, 1, pt("mem", "host=a", "value", 3, 3))
	flushNow(t, s)
	require.NoError(t, s.Close())
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	require.ElementsMatch(t, []string{all[2], all[3]}, keys(t, s))
	got, err := s.Query("mem", nil, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 3, Value: 3}}, got[0].Points)
}

// TestDeletesBesideBackgroundFlushes: writes and deletes interleaved while
// memtables freeze and flush in the background (every 40 points) and
// readers query, scan and list keys: once settled, and after a restart,
// the shard holds exactly what applying the entries in order gives.
func TestDeletesBesideBackgroundFlushes(t *testing.T) {
	dir := t.TempDir()
	opts := []Option{WithFlushPoints(40), WithFlushInterval(0), WithCompactRate(0)}
	e, s := openShardAt(t, dir, opts...)
	model := map[string]map[int64]float64{"a": {}, "b": {}}
	stop := make(chan struct{})
	done := make(chan error, 1)
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(halt) // a failed write below must not leave the reader running
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := s.Query("cpu", nil, math.MinInt64, math.MaxInt64); err != nil {
				done <- err
				return
			}
			if err := s.(Scanner).Scan("cpu", map[string]string{"host": "a"}, 0, 1000, func(string) bool { return true },
				func(string, []SeriesPoint) error { return nil }); err != nil {
				done <- err
				return
			}
			if err := s.SeriesKeys(func(string) error { return nil }); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range 300 {
		ts := int64(i % 97)
		host := []string{"a", "b"}[i%2]
		v := float64(i)
		apply(t, s, 1, pt("cpu", "host="+host, "value", ts, v))
		model[host][ts] = v
		if i%23 == 22 {
			lo, hi := int64(i%50), int64(i%50+20)
			del(t, s, 1, wire.Delete{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "a"}}, Min: lo, Max: hi})
			for ts := range model["a"] {
				if ts >= lo && ts <= hi {
					delete(model["a"], ts)
				}
			}
		}
	}
	halt()
	require.NoError(t, <-done)
	var want []string
	for host, pts := range model {
		for ts, v := range pts {
			want = append(want, fmt.Sprintf("%s/@%d=%g", host, ts, v))
		}
	}
	settle(t, s)
	require.ElementsMatch(t, want, seen(t, s))
	require.NoError(t, s.Close())
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, opts...)
	require.ElementsMatch(t, want, seen(t, s), "after a restart")
	flushNow(t, s)
	require.ElementsMatch(t, want, seen(t, s), "all flushed")
}
