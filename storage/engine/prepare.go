package engine

import (
	"slices"
	"sync"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// Append prepares an entry before queueing it: it encodes the entry's log
// payload and builds its points' series keys. Append runs in the writer's
// goroutine, which has just parsed and split those points, so they are
// still in its CPU's caches; the committer (one goroutine per shard, taking
// every writer's entries) found them evicted by the time it got to them,
// and with many series, whose memtable no longer fits the caches either,
// encoding and key building cost it up to twice as much there. Preparing
// also takes that work off the one goroutine a shard's commits go through.

// prepared is an entry's log payload and series keys.
type prepared struct {
	payload []byte // Entry.appendBinary
	keys    pointKeys
}

// pointKeys holds the series keys of an entry's points, one per run of
// consecutive points of one series (the fields of one line).
type pointKeys struct {
	buf []byte
	// ends[i] is where the key of point i ends in buf; the previous
	// point's end means the same series as that point (a key is never
	// empty: it holds the field separator).
	ends []int32
}

// build makes the keys of points.
func (k *pointKeys) build(points []lineproto.Point) {
	k.reset(len(points))
	for i := range points {
		k.add(points, i)
	}
}

func (k *pointKeys) reset(n int) { k.buf, k.ends = k.buf[:0], slices.Grow(k.ends[:0], n) }

// add makes the key of points[i], after those before it.
func (k *pointKeys) add(points []lineproto.Point, i int) {
	p := &points[i]
	if i == 0 || !sameSeries(&points[i-1], p) {
		k.buf = lineproto.AppendSeriesKey(k.buf, p.Metric, p.Tags, p.Field)
	}
	k.ends = append(k.ends, int32(len(k.buf)))
}

// of returns the key of point i, or same when point i is of the series of
// point i-1.
func (k *pointKeys) of(i int) (key []byte, same bool) {
	if i == 0 {
		return k.buf[:k.ends[0]], false
	}
	start := k.ends[i-1]
	if start == k.ends[i] {
		return nil, true
	}
	return k.buf[start:k.ends[i]], false
}

// sameSeries says whether b is surely of a's series: the fields of one line
// share its metric and its tags (one slice), which spares building the key.
// False may still be the same series.
func sameSeries(a, b *lineproto.Point) bool {
	return len(a.Tags) == len(b.Tags) && (len(a.Tags) == 0 || &a.Tags[0] == &b.Tags[0]) &&
		a.Metric == b.Metric && a.Field == b.Field
}

var preparedPool = sync.Pool{New: func() any { return new(prepared) }}

// prepare encodes e's payload and builds its keys, in buffers from a pool
// (release gives them back).
func prepare(e *Entry) *prepared {
	pr := preparedPool.Get().(*prepared)
	// One pass: each point's key right after its encoding, while the
	// point's strings are in the caches (two passes over a large entry
	// read them from memory twice).
	pr.keys.reset(len(e.Points))
	pr.payload = e.appendBinaryEach(slices.Grow(pr.payload[:0], 64+pointBytesHint*len(e.Points)),
		func(i int) { pr.keys.add(e.Points, i) })
	return pr
}

// maxPooledBytes bounds the buffers kept for the next entry: a rare huge
// entry's are left to the collector.
const maxPooledBytes = 1 << 20

func (pr *prepared) release() {
	if cap(pr.payload) > maxPooledBytes || cap(pr.keys.buf) > maxPooledBytes || cap(pr.keys.ends) > maxPooledBytes/4 {
		return
	}
	preparedPool.Put(pr)
}
