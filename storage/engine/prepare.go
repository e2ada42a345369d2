package engine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
)

// Prepared is the work Append does on an entry's points before queueing
// it: the points part of the entry's log payload, and the points' series
// keys. Append prepares an entry itself unless Entry.Prepared holds what
// Prepare made of its points beforehand.
//
// Where it happens is what matters: the committer (one goroutine per
// shard, taking every writer's entries) found the points evicted from the
// caches by the time it got to them, and with many series, whose memtable
// no longer fits the caches either, encoding and key building cost it up to
// twice as much there. The writer's goroutine had them; better still is
// the broker's goroutine that has just split a batch by shard, as it hands
// each shard to a goroutine of its own (storage.Host.Prepare): a write cost
// 4-8 % less CPU per point there (BENCHMARKS.md).
type Prepared struct {
	points []byte // appendPointsEach
	keys   pointKeys
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

// check refuses keys over MaxSeriesKeyBytes.
func (k *pointKeys) check() error {
	var start int32
	for _, end := range k.ends {
		if n := end - start; n > MaxSeriesKeyBytes {
			return fmt.Errorf("%w: a key of %d bytes, over %d", ErrKeyTooLarge, n, MaxSeriesKeyBytes)
		}
		start = end
	}
	return nil
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

var preparedPool = sync.Pool{New: func() any { return new(Prepared) }}

// Prepare encodes points and builds their keys for an Entry of exactly
// these points, in buffers from a pool. Append takes it: an entry's
// Prepared is used once, and given back to the pool after its commit.
// One not given to Append is left to the collector.
func Prepare(points []lineproto.Point) *Prepared {
	pr := preparedPool.Get().(*Prepared)
	// One pass: each point's key right after its encoding, while the
	// point's strings are in the caches (two passes over a large entry
	// read them from memory twice).
	pr.keys.reset(len(points))
	pr.points = wire.AppendPoints(slices.Grow(pr.points[:0], 16+pointBytesHint*len(points)), points,
		func(i int) { pr.keys.add(points, i) })
	return pr
}

// maxPooledBytes bounds the buffers kept for the next entry: a rare huge
// entry's are left to the collector.
const maxPooledBytes = 1 << 20

func (pr *Prepared) release() {
	if cap(pr.points) > maxPooledBytes || cap(pr.keys.buf) > maxPooledBytes || cap(pr.keys.ends) > maxPooledBytes/4 {
		return
	}
	preparedPool.Put(pr)
}
