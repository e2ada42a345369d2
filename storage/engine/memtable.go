package engine

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
)

// memtable holds the points of the entries applied since the last flush. Those
// entries are durable in the log bucket already; the memtable only spares
// rewriting every touched series page on every commit, and is rebuilt from the
// log when the shard is opened.
//
// Writers (Apply, under the shard's write mutex) insert under mu; readers
// (Query) copy points out under mu's read side, so they see whole entries only.
// The flush reads it without mu: it runs under the shard's write mutex, which
// every mutation holds too.
type memtable struct {
	mu     sync.RWMutex
	series []memSeries // one allocation: with many series, fewer objects for the GC and neighbours in memory
	// ids are the series' ids by position (0: not indexed when the series
	// came in). A series with an id is found through its slot in the index
	// (seriesSlot.gen, pos: gen is this memtable's number); fresh finds
	// the others by key.
	ids      []uint64
	gen      uint32
	fresh    map[string]int32
	byMetric map[string][]int32
	metric   string     // the key of byMetric the last new series went to
	entries  []memEntry // in txn order, one per applied entry, empty ones included
	points   int        // distinct (series, ts) held
	bytes    int64      // estimated heap held, for the memory budget
	since    time.Time  // when the first entry went in, for the age-based flush

	ix *seriesIndex // the shard's flushed series, whose key strings are reused
	// pending collects, during one insert, the points of each series older
	// than its newest that are not in its pts yet; they are merged in once
	// at the end of the batch, so out-of-order writes cost O(n) per batch
	// instead of O(n) per point. pend finds them by (series, ts).
	pending map[int32][]memPoint
	pend    map[memSlot]int
	prev    int32 // 1 + the series seriesOf returned last (0: none), whose next predicts the following one
	// ptsHint is the room for points a series the index holds starts
	// with: what each series of the last flushed memtable held. A series
	// new to the shard starts with freshRoom at most (see roomFor).
	ptsHint int
	// arena hands out the first points of new series (their room each)
	// from larger allocations: with many series, one object per series was
	// most of what the GC had to mark.
	arena []memPoint
	// keys holds the keys of series never flushed (the shard's index keeps
	// them once flushed), many to an allocation, for the same reason.
	keys strings.Builder
	// strs holds the values of the string points, with ids strBase, ...:
	// a string series' memPoint bits are its string's id (types.go).
	strs    []string
	strBase uint64
	// dels are the deletes among entries, in order, applied to the
	// memtable's points already and to the blocks by its flush (delete.go).
	dels []*wire.Delete

	// under is the frozen memtable being flushed while this one fills, until
	// its flush ends (see lookup).
	under atomic.Pointer[memtable]
}

// memSeries is one series' points, sorted by ts and unique.
type memSeries struct {
	key string
	typ models.FieldType // of every point of the series
	// next is 1 + the series looked up after this one last time (0: none).
	// Writers send their series in much the same order batch after batch,
	// so it names the next series without hashing its key into an index
	// that, with many series, no longer fits the caches; a wrong guess
	// costs one key comparison.
	next int32
	// diskMax bounds the newest flushed ts of the series from above
	// (math.MinInt64: nothing flushed, math.MaxInt64: unknown): a point
	// after it replaces nothing on disk, so its undo needs no record.
	diskMax int64
	// last is the ts of pts' last point (when there is one), kept beside
	// the series' other fields: the in-order point, nearly every one, then
	// needs only this one cache line per series before its append, which
	// with many series mattered (the 64 bytes of a memSeries are one line).
	last int64
	pts  []memPoint
}

type memPoint struct {
	ts   int64
	bits uint64 // float64 bits
}

type memSlot struct {
	series int32
	ts     int64
}

// memEntry keeps the undo information of an unflushed entry until the flush
// turns it into the entry's undo record, so flushed entries can still be cut
// by TruncateAfter exactly as before. Only the points that may have
// replaced a value are recorded; the others (points newer than anything of
// their series, nearly all of them) replaced nothing, which costs no memory.
type memEntry struct {
	txn    uint64
	points int
	undo   []memUndo // by point index
}

// memUndo records what one point write replaced: a memtable value (prev), or,
// when fromDisk, whatever the flushed data holds at (series, ts). That one is
// looked up at flush time, where it is nearly free: the flush walks the series
// in ts order anyway, and only points at or before the series' newest flushed
// ts can have replaced anything.
type memUndo struct {
	ts       int64
	prev     uint64
	series   int32
	point    int32 // index into the entry's points
	fromDisk bool
}

func newMemtable(ix *seriesIndex) *memtable {
	n := int(min(ix.lastSeries.Load(), maxSizeHint))
	return &memtable{ix: ix, gen: ix.gen.Add(1), fresh: make(map[string]int32), series: make([]memSeries, 0, n),
		ids: make([]uint64, 0, n), byMetric: make(map[string][]int32), ptsHint: int(min(ix.lastPerSeries.Load(), maxPointsHint))}
}

// Bounds of the sizes a memtable starts with (from the last flushed one).
const (
	maxSizeHint   = 1 << 20
	maxPointsHint = 1024
	arenaPoints   = 8192     // points per memtable arena allocation (128 KiB)
	keyChunkBytes = 32 << 10 // bytes per allocation of new series keys
)

func (mt *memtable) empty() bool { return len(mt.entries) == 0 }

// Estimates of what the memtable holds per point and per series, with the
// slack of growing slices and maps, for the memory budget.
const (
	memPointBytes = 24 // memPoint, amortized over slice growth
	memUndoBytes  = 32 // memUndo, for the points that replace a value
	memEntryBytes = 48
	// A series: its memSeries, id and place in byMetric, with slack
	// (measured: about 80 bytes); one that had no id when it came in
	// also has an entry in fresh (and its key, counted as it is). Found
	// through their slots, the series that have ids need no map entry
	// here, so a memtable's room per indexed series (activeLimit) holds
	// more of their points.
	memSeriesBytes = 96
	memFreshBytes  = 64
)

// sizeBytes is the memtable's estimated heap use; the caller holds the
// shard's write mutex, which every insert holds too.
func (mt *memtable) sizeBytes() int64 { return mt.bytes }

// insert adds an entry's points; later points win over earlier ones at the
// same series and ts, within the entry and across entries. keys are the
// points' series keys (nil: made here).
func (mt *memtable) insert(e Entry, keys *pointKeys, now time.Time) {
	if e.Delete != nil {
		mt.mu.Lock()
		defer mt.mu.Unlock()
		if mt.empty() {
			mt.since = now
		}
		mt.applyDelete(e.Delete)
		mt.entries = append(mt.entries, memEntry{txn: e.TxnID})
		return
	}
	if keys == nil {
		keys = new(pointKeys)
		keys.build(e.Points)
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if mt.empty() {
		mt.since = now
	}
	var undo []memUndo
	var touched []int32 // series with pending points
	var idx int32
	for i := range e.Points {
		p := &e.Points[i]
		if key, same := keys.of(i); !same {
			idx = mt.seriesOf(key, p)
		}
		ms := &mt.series[idx]
		if p.Type != ms.typ {
			// The leader admits a point only of its field's type
			// (fieldTypes.check); a series never holds two.
			continue
		}
		u := memUndo{ts: p.TS, series: idx, point: int32(i), fromDisk: true}
		bits := p.Bits()
		if p.Type == models.FieldString {
			bits = mt.addString(p.Str)
		}
		if len(ms.pts) == 0 || p.TS > ms.last {
			ms.pts = append(ms.pts, memPoint{p.TS, bits})
			ms.last = p.TS
			mt.points++
			if p.TS > ms.diskMax {
				continue // replaced nothing, in memory or on disk
			}
		} else if j, found := slices.BinarySearchFunc(ms.pts, p.TS, cmpPointTS); found {
			u.fromDisk, u.prev = false, ms.pts[j].bits
			ms.pts[j].bits = bits
		} else if k, ok := mt.pend[memSlot{idx, p.TS}]; ok {
			pp := mt.pending[idx]
			u.fromDisk, u.prev = false, pp[k].bits
			pp[k].bits = bits
		} else {
			if mt.pend == nil {
				mt.pend, mt.pending = make(map[memSlot]int), make(map[int32][]memPoint)
			}
			pp := mt.pending[idx]
			if len(pp) == 0 {
				touched = append(touched, idx)
			}
			mt.pend[memSlot{idx, p.TS}] = len(pp)
			mt.pending[idx] = append(pp, memPoint{p.TS, bits})
			mt.points++
			if p.TS > ms.diskMax {
				continue
			}
		}
		undo = append(undo, u)
	}
	mt.bytes += int64(len(e.Points))*memPointBytes + int64(len(undo))*memUndoBytes + memEntryBytes
	for _, idx := range touched {
		mt.series[idx].merge(mt.pending[idx])
	}
	clear(mt.pend)
	clear(mt.pending)
	mt.entries = append(mt.entries, memEntry{txn: e.TxnID, points: len(e.Points), undo: undo})
}

func cmpPointTS(p memPoint, ts int64) int { return cmp.Compare(p.ts, ts) }

// addString keeps s and returns its id.
func (mt *memtable) addString(s string) uint64 {
	id := mt.ix.nextStr.Add(1) - 1
	if len(mt.strs) == 0 {
		mt.strBase = id
	}
	// Clone: s may point into a whole request body.
	mt.strs = append(mt.strs, strings.Clone(s))
	mt.bytes += int64(len(s)) + 16
	return id
}

// strView is the memtable's strings, for readers (under mu).
func (mt *memtable) strView() strView { return strView{base: mt.strBase, strs: mt.strs} }

// seriesOf returns the series of p, whose key is key, creating it on first
// sight. It tries the series that followed the previous one last time first
// (see memSeries.next).
func (mt *memtable) seriesOf(key []byte, p *lineproto.Point) int32 {
	if mt.prev > 0 {
		if n := mt.series[mt.prev-1].next; n > 0 && mt.series[n-1].key == string(key) {
			mt.prev = n
			return n - 1
		}
	}
	idx := mt.lookup(key, p) // may move mt.series
	if mt.prev > 0 {
		mt.series[mt.prev-1].next = idx + 1
	}
	mt.prev = idx + 1
	return idx
}

// lookup finds the series of p, whose key is key, creating it on first
// sight: by key among the series that had no id when they came in, else
// in the index (the series that followed the previous one last time
// first, see seriesSlot), then by the slot of the id.
func (mt *memtable) lookup(key []byte, p *lineproto.Point) int32 {
	if idx, ok := mt.fresh[string(key)]; ok {
		return idx
	}
	// under first: once it is nil, the index holds the frozen series.
	f := mt.under.Load()
	ix := mt.ix
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var prevID uint64
	if mt.prev > 0 {
		prevID = mt.ids[mt.prev-1]
	}
	var id uint64
	if prevID != 0 {
		if n := ix.slots[prevID].follow; n != 0 && ix.slots[n].key == string(key) {
			id = n
		}
	}
	if id == 0 {
		id = ix.ids[string(key)]
		if prevID != 0 && id != 0 {
			ix.slots[prevID].follow = id
		}
	}
	if id == 0 {
		k, diskMax := "", int64(math.MinInt64) // a series never flushed
		if fs := f.find(0, key, nil); fs != nil {
			k, diskMax = fs.key, fs.pts[len(fs.pts)-1].ts
		}
		if k == "" {
			k = mt.newKey(key)
			mt.bytes += int64(len(k))
		}
		idx := mt.add(k, 0, diskMax, p)
		mt.fresh[k] = idx
		mt.bytes += memFreshBytes
		return idx
	}
	sl := &ix.slots[id]
	if mt.holds(sl, id) {
		return sl.pos
	}
	// The frozen memtable counts as flushed: it will be by the time mt
	// flushes, so a point of mt at or before the frozen one's newest of
	// its series may replace a value then, and must keep its undo and be
	// merged into the blocks.
	diskMax := sl.newest
	if fs := f.find(id, key, sl); fs != nil {
		diskMax = max(diskMax, fs.pts[len(fs.pts)-1].ts)
	}
	idx := mt.add(sl.key, id, diskMax, p)
	sl.gen, sl.pos = mt.gen, idx
	return idx
}

// holds says whether slot sl of series id is its place in mt.
func (mt *memtable) holds(sl *seriesSlot, id uint64) bool {
	return sl.gen == mt.gen && int(sl.pos) < len(mt.ids) && mt.ids[sl.pos] == id
}

// find returns the series of a frozen memtable f (nil: none) whose key is
// key and id is id (0: none yet, sl nil), if f holds points of it.
func (f *memtable) find(id uint64, key []byte, sl *seriesSlot) *memSeries {
	if f == nil {
		return nil
	}
	idx, ok := int32(0), false
	if id != 0 && f.holds(sl, id) {
		idx, ok = sl.pos, true
	} else {
		// It may have had no id when it came in: its id is that
		// memtable's flush's.
		idx, ok = f.fresh[string(key)]
	}
	if !ok || len(f.series[idx].pts) == 0 {
		return nil
	}
	return &f.series[idx]
}

// add appends a new series of p, keyed k, with id (0: none) and diskMax.
func (mt *memtable) add(k string, id uint64, diskMax int64, p *lineproto.Point) int32 {
	idx := int32(len(mt.series))
	ms := memSeries{key: k, diskMax: diskMax, typ: p.Type}
	if t, known := mt.ix.ft.typeOf(p.Metric, p.Field); known {
		ms.typ = t // a point of another type is not kept (insert)
	} else {
		mt.ix.ft.claim(p.Metric, p.Field, p.Type)
	}
	if h := mt.roomFor(id); h > 0 {
		if len(mt.arena)+h > cap(mt.arena) {
			mt.arena = make([]memPoint, 0, max(arenaPoints, h))
		}
		n := len(mt.arena)
		mt.arena = mt.arena[:n+h]
		ms.pts = mt.arena[n : n : n+h] // capped: a series that outgrows it moves out
	}
	mt.series = append(mt.series, ms)
	mt.ids = append(mt.ids, id)
	mt.bytes += memSeriesBytes
	// Clone: the metric may point into a whole request body (and a map
	// assignment keeps the key it is given). Once per metric, not per
	// series: the series of a batch mostly share theirs.
	if p.Metric != mt.metric {
		mt.metric = strings.Clone(p.Metric)
	}
	mt.byMetric[mt.metric] = append(mt.byMetric[mt.metric], idx)
	return idx
}

// freshRoom bounds the room for points a series new to the shard starts
// with. The hint is what each series of the last flushed memtable held,
// and a series the shard never had has no such past: when 160,000 of them
// arrived at once after 20 s of 40,000 series, each took the room of a
// series written all along and put one point in it per batch. The live
// heap doubled within the step's first second, and the node's peak RSS
// was 750-820 MiB against 440-555 MiB with this bound (issue 21). A new
// series that does get many points grows its slice as any series that
// outgrows its room does.
const freshRoom = 4

// roomFor is the room for points a new series of mt with id (0: none yet)
// starts with.
func (mt *memtable) roomFor(id uint64) int {
	if id == 0 {
		return min(mt.ptsHint, freshRoom)
	}
	return mt.ptsHint
}

// newKey returns key as a string kept in the memtable's key chunks. A
// strings.Builder never changes the bytes it has returned a string of, so
// each key stays valid as the chunk fills up after it.
func (mt *memtable) newKey(key []byte) string {
	n := len(key)
	if mt.keys.Cap()-mt.keys.Len() < n {
		mt.keys = strings.Builder{}
		mt.keys.Grow(max(keyChunkBytes, n))
	}
	start := mt.keys.Len()
	mt.keys.Write(key)
	return mt.keys.String()[start:]
}

// span is the index range [lo, hi) of ms's points dated start to end,
// both included.
func (ms *memSeries) span(start, end int64) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(ms.pts, start, cmpPointTS)
	hi, found := slices.BinarySearchFunc(ms.pts, end, cmpPointTS)
	if found {
		hi++
	}
	return lo, hi
}

// merge merges a batch's out-of-order points, which are disjoint from pts,
// into pts.
func (ms *memSeries) merge(pending []memPoint) {
	slices.SortFunc(pending, func(a, b memPoint) int { return cmp.Compare(a.ts, b.ts) })
	out := make([]memPoint, 0, len(ms.pts)+len(pending))
	i, j := 0, 0
	for i < len(ms.pts) && j < len(pending) {
		if ms.pts[i].ts < pending[j].ts {
			out = append(out, ms.pts[i])
			i++
		} else {
			out = append(out, pending[j])
			j++
		}
	}
	out = append(out, ms.pts[i:]...)
	ms.pts = append(out, pending[j:]...)
	ms.last = ms.pts[len(ms.pts)-1].ts
}

// memHit is one matching memtable series with its points in the query range.
type memHit struct {
	key    string
	header Series
	points []SeriesPoint
}

// collect copies out the series of metric matching match that hold points in
// [start, end], sorted by series key like the flushed series.
func (mt *memtable) collect(metric string, match map[string]string, start, end int64, lim Limits) ([]memHit, error) {
	mt.mu.RLock()
	defer mt.mu.RUnlock()
	var hits []memHit
	res := strResolver{mems: []strView{mt.strView()}}
	b := budget{lim: lim} // each hit is a series of the answer (a point also flushed counts twice: conservative)
	for _, idx := range mt.byMetric[metric] {
		ms := &mt.series[idx]
		lo, hi := ms.span(start, end)
		if lo >= hi {
			continue
		}
		header, ok, err := matchSeries(ms.key, match)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if err := b.add(hi - lo); err != nil {
			return nil, err
		}
		points := make([]SeriesPoint, hi-lo)
		for i, p := range ms.pts[lo:hi] {
			if points[i], err = res.point(p, ms.typ); err != nil {
				return nil, err
			}
		}
		hits = append(hits, memHit{key: ms.key, header: header, points: points})
	}
	slices.SortFunc(hits, func(a, b memHit) int { return strings.Compare(a.key, b.key) })
	return hits, nil
}

// mergePoints merges two ts-sorted point lists; newer wins on the same ts.
func mergePoints(older, newer []SeriesPoint) []SeriesPoint {
	switch {
	case len(newer) == 0:
		return older
	case len(older) == 0:
		return newer
	case older[len(older)-1].TS < newer[0].TS:
		return append(older, newer...)
	}
	return mergeSorted(older, newer, func(p SeriesPoint) int64 { return p.TS }, nil)
}

// mergeSorted merges two lists sorted by ts; on the same ts the newer
// element wins, and replaced (when set) is told the older one it replaced.
func mergeSorted[T any](older, newer []T, ts func(T) int64, replaced func(T)) []T {
	out := make([]T, 0, len(older)+len(newer))
	i, j := 0, 0
	for i < len(older) && j < len(newer) {
		switch a, b := ts(older[i]), ts(newer[j]); {
		case a < b:
			out = append(out, older[i])
			i++
		case a > b:
			out = append(out, newer[j])
			j++
		default:
			if replaced != nil {
				replaced(older[i])
			}
			out = append(out, newer[j])
			i++
			j++
		}
	}
	out = append(out, older[i:]...)
	return append(out, newer[j:]...)
}
