package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// slotKey is the series key of host h in these tests.
func slotKey(h string) string { return "m,h=" + h + "#value" }

// TestSeriesFoundThroughTheirSlots: a memtable finds the series that have
// ids through their index slots (no map of its own), the others by key.
// Over memtables in turn, with batches in the same order, shuffled, with
// repeats and with new series among the known ones, every point lands in
// its series, each series is held once per memtable, the slots name each
// series' place in the newest memtable, and follow names the series sent
// after each one.
func TestSeriesFoundThroughTheirSlots(t *testing.T) {
	ix := newSeriesIndex()
	hosts := make([]string, 300)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%03d", i)
		if i < 200 {
			ix.put(slotKey(hosts[i]), uint64(i+1)) // flushed: ids 1..200
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var ts int64
	for round := range 4 {
		mt := newMemtable(ix)
		model := map[string][]SeriesPoint{}
		order := slices.Clone(hosts[:150])
		for range 30 {
			ts++
			switch rng.IntN(3) {
			case 0:
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			case 1: // a repeat, or a series with no id yet
				order[rng.IntN(len(order))] = hosts[rng.IntN(len(hosts))]
			}
			points := make([]lineproto.Point, len(order))
			for i, h := range order {
				points[i] = pt("m", "h="+h, "value", ts, float64(ts*1000+int64(i)))
				k := slotKey(h)
				if n := len(model[k]); n > 0 && model[k][n-1].TS == ts {
					model[k][n-1].Value = points[i].Value
				} else {
					model[k] = append(model[k], SeriesPoint{TS: ts, Value: points[i].Value})
				}
			}
			mt.insert(Entry{TxnID: uint64(ts), Term: 1, Points: points}, nil, time.Time{})
		}
		require.Len(t, mt.series, len(model), "round %d: each series held once", round)
		for i, ms := range mt.series {
			id := ix.ids[ms.key]
			require.Equal(t, id, mt.ids[i], "round %d: %s", round, ms.key)
			if id == 0 {
				require.EqualValues(t, i, mt.fresh[ms.key])
				continue
			}
			require.NotContains(t, mt.fresh, ms.key, "a series with an id is found through its slot")
			require.Equal(t, mt.gen, ix.slots[id].gen)
			require.EqualValues(t, i, ix.slots[id].pos)
		}
		hits, err := mt.collect("m", nil, 0, 1<<20, Limits{})
		require.NoError(t, err)
		got := map[string][]SeriesPoint{}
		for _, h := range hits {
			got[h.key] = h.points
		}
		require.Equal(t, model, got, "round %d", round)
	}

	// A fresh memtable looks every series up: follow then names the
	// series sent after each known one.
	mt := newMemtable(ix)
	order := hosts[:200]
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	points := make([]lineproto.Point, len(order))
	for i, h := range order {
		points[i] = pt("m", "h="+h, "value", ts+1, 1)
	}
	mt.insert(Entry{TxnID: uint64(ts + 1), Term: 1, Points: points}, nil, time.Time{})
	for i := 1; i < len(order); i++ {
		require.Equal(t, ix.ids[slotKey(order[i])], ix.slots[ix.ids[slotKey(order[i-1])]].follow, "after %s", order[i-1])
	}
}

// TestSeriesSlotOfAnotherMemtable: a slot that names a place in the
// memtable (same number) that holds another series (numbers wrapped
// around) is not taken for the series' place: the series gets its own.
func TestSeriesSlotOfAnotherMemtable(t *testing.T) {
	ix := newSeriesIndex()
	ix.put(slotKey("a"), 1)
	ix.put(slotKey("b"), 2)
	mt := newMemtable(ix)
	mt.insert(Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 1, 1)}}, nil, time.Time{})
	ix.slots[2].gen, ix.slots[2].pos = mt.gen, 0 // stale: position 0 is a's
	mt.insert(Entry{TxnID: 2, Term: 1, Points: []lineproto.Point{pt("m", "h=b", "value", 1, 2)}}, nil, time.Time{})
	require.Len(t, mt.series, 2)
	require.Equal(t, []uint64{1, 2}, mt.ids)
	require.Equal(t, []memPoint{{1, mt.series[0].pts[0].bits}}, mt.series[0].pts)
	require.Equal(t, slotKey("b"), mt.series[1].key)
	require.EqualValues(t, 1, ix.slots[2].pos)
}

// TestFrozenSeriesCountAsFlushed: a point of the active memtable at or
// before the frozen memtable's newest of its series keeps its undo (it
// replaces a value once the frozen one is flushed), whether the series has
// an id (found through its slot), got one from the frozen memtable's flush
// or has none yet; a point after it keeps none.
func TestFrozenSeriesCountAsFlushed(t *testing.T) {
	ix := newSeriesIndex()
	ix.put(slotKey("a"), 1)
	ix.setNewest([]seriesMax{{1, 5}})
	frozen := newMemtable(ix)
	frozen.insert(Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{
		pt("m", "h=a", "value", 10, 1), pt("m", "h=new", "value", 10, 2), pt("m", "h=new2", "value", 10, 3),
	}}, nil, time.Time{})
	require.Equal(t, []uint64{1, 0, 0}, frozen.ids)
	// The frozen memtable's flush has indexed one of its new series, not
	// yet the other.
	ix.setNewest([]seriesMax{{2, 10}})
	ix.put(slotKey("new"), 2)
	mt := newMemtable(ix)
	mt.under.Store(frozen)
	undone := func(txn uint64, points ...lineproto.Point) int {
		mt.insert(Entry{TxnID: txn, Term: 1, Points: points}, nil, time.Time{})
		return len(mt.entries[len(mt.entries)-1].undo)
	}
	require.Equal(t, 1, undone(2, pt("m", "h=a", "value", 10, 4)), "over the frozen point (slot)")
	require.Equal(t, 1, undone(3, pt("m", "h=new", "value", 9, 5)), "before the frozen point (id from its flush)")
	require.Equal(t, 1, undone(4, pt("m", "h=new2", "value", 9, 6)), "before the frozen point (no id yet)")
	require.Equal(t, 0, undone(5, pt("m", "h=a", "value", 11, 7), pt("m", "h=new", "value", 11, 8), pt("m", "h=new2", "value", 11, 9)))
	require.Equal(t, []uint64{1, 2, 0}, mt.ids)
	require.Equal(t, map[string]int32{slotKey("new2"): 2}, mt.fresh)
	require.Equal(t, frozen.series[2].key, mt.series[2].key)
}

// TestSeriesWithIDsCostLess: a memtable charges a series found through its
// slot memSeriesBytes, and one with no id also its fresh entry and its key.
func TestSeriesWithIDsCostLess(t *testing.T) {
	ix := newSeriesIndex()
	ix.put(slotKey("a"), 1)
	ix.setNewest([]seriesMax{{1, 0}})
	mt := newMemtable(ix)
	charge := func(txn uint64, h string) int64 {
		before := mt.bytes
		mt.insert(Entry{TxnID: txn, Term: 1, Points: []lineproto.Point{pt("m", "h="+h, "value", 1, 1)}}, nil, time.Time{})
		return mt.bytes - before - memPointBytes - memEntryBytes
	}
	require.EqualValues(t, memSeriesBytes, charge(1, "a"))
	require.EqualValues(t, memSeriesBytes+memFreshBytes+len(slotKey("b")), charge(2, "b"))
}
