package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Flushed points live in compressed per-series blocks (gorilla.go), kept as
// bbolt values, so one bbolt commit moves a memtable into
// blocks, writes its undo records and advances flushed_txn atomically:
//
//	skey    series id (u64 BE) -> seriesKey (the key -> id map is rebuilt from
//	                            it in memory at open)
//	post    posting key      -> sorted series ids, delta uvarints: the query
//	                            index (see postingPrefix)
//	blocks  id | ts(minTS)   -> block; one series' blocks never overlap in time
//	recent  id | ts(minTS)   -> first txn of the flush that wrote the block from
//	                            the memtable alone: such a block can be rebuilt
//	                            from the log while the log still holds that txn
var (
	bucketSKey   = []byte("skey")
	bucketPost   = []byte("post")
	bucketBlocks = []byte("blocks")
	bucketRecent = []byte("recent")

	keyNextSID    = []byte("next_sid")
	keyRecentFrom = []byte("recent_from")

	allBuckets = [][]byte{bucketMeta, bucketLog, bucketUndo, bucketSKey, bucketPost, bucketBlocks, bucketRecent, bucketFTypes, bucketStrs, bucketGone}
)

// blockFill packs block pages full: a series' new blocks go after its older
// ones, and compaction rewrites them in key order.
const blockFill = 0.95

// Posting keys: a kind byte, then length-prefixed strings, then the series id.
const (
	postMetric = 'm' // metric -> id
	postTag    = 't' // metric, tag key, tag value -> id
	postField  = 'f' // metric, field -> id
)

func appendLP(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func postingPrefix(kind byte, parts ...string) []byte {
	return appendPostingKey(nil, kind, parts...)
}

func appendPostingKey(b []byte, kind byte, parts ...string) []byte {
	b = append(b, kind)
	for _, p := range parts {
		b = appendLP(b, p)
	}
	return b
}

// newSeries allocates ids and writes the index entries of series created by
// one flush; postings gathers them per posting key and writes each list once,
// and the next series id is read and written once (finish writes both).
// A flush of many new series creates them by the thousand: posting keys are
// built in one buffer and only a key not seen before in the flush becomes a
// string, and the key values bbolt keeps until the commit share allocations.
// Most posting keys of new series are new themselves (a tag value unique to
// the series, such as a host name), so a list's first id is held inline.
type newSeries struct {
	tx         *bolt.Tx
	skey, post *bolt.Bucket
	posts      map[string]int // posting key -> index in lists
	lists      []postIDs
	next       uint64 // the next series id; 0: not read yet
	buf        []byte // posting key scratch
	vals       valueArena
	hint       int // how many series the flush may create (sizes posts)
}

// postIDs is a posting list's new ids, in order: first, then rest.
type postIDs struct {
	first uint64
	rest  []uint64
}

func (ns *newSeries) create(key string) (uint64, error) {
	metric, tags, field, err := lineproto.ParseSeriesKey(key)
	if err != nil {
		return 0, fmt.Errorf("%w: series key %q: %v", ErrCorrupt, key, err)
	}
	if ns.next == 0 {
		ns.next = 1
		if v := ns.tx.Bucket(bucketMeta).Get(keyNextSID); len(v) == 8 {
			ns.next = beUint64(v)
		}
		ns.skey, ns.post = ns.tx.Bucket(bucketSKey), ns.tx.Bucket(bucketPost)
		ns.posts = make(map[string]int, ns.hint)
		ns.lists = make([]postIDs, 0, ns.hint)
	}
	id := ns.next
	ns.next++
	var k [8]byte // bbolt copies keys, not values
	binary.BigEndian.PutUint64(k[:], id)
	if err := ns.skey.Put(k[:], ns.vals.addString(key)); err != nil {
		return 0, err
	}
	ns.add(id, appendPostingKey(ns.buf[:0], postMetric, metric))
	ns.add(id, appendPostingKey(ns.buf[:0], postField, metric, field))
	for _, t := range tags {
		ns.add(id, appendPostingKey(ns.buf[:0], postTag, metric, t.Key, t.Value))
	}
	return id, nil
}

// add adds id to the list of posting key k (which lives in ns.buf).
func (ns *newSeries) add(id uint64, k []byte) {
	ns.buf = k
	if i, ok := ns.posts[string(k)]; ok {
		ns.lists[i].rest = append(ns.lists[i].rest, id)
		return
	}
	ns.posts[string(k)] = len(ns.lists)
	ns.lists = append(ns.lists, postIDs{first: id})
}

// finish records the next series id and appends the new ids, which are above
// every existing one, to their posting lists, in key order. The lists are
// read first, with one cursor stepping forward through the bucket (the keys
// a flush's new series join are many and close together; a Get seeks from
// the root with a cursor of its own each time), and written after, since a
// put invalidates the cursor's position.
func (ns *newSeries) finish() error {
	if ns.next == 0 {
		return nil // nothing created
	}
	if err := ns.tx.Bucket(bucketMeta).Put(keyNextSID, u64Key(ns.next)); err != nil {
		return err
	}
	type keyed struct {
		key string
		i   int
		v   []byte
	}
	ks := make([]keyed, 0, len(ns.posts))
	for k, i := range ns.posts {
		ks = append(ks, keyed{key: k, i: i})
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	c := ns.post.Cursor()
	var ck, cv []byte
	for j := range ks {
		k := []byte(ks[j].key)
		ck, cv = seekForward(c, ck, cv, k)
		var old []byte
		if bytes.Equal(ck, k) {
			old = cv
		}
		last, err := lastPosting(old)
		if err != nil {
			return err
		}
		l := &ns.lists[ks[j].i]
		ns.vals.room(len(old) + binary.MaxVarintLen64*(1+len(l.rest)))
		start := len(ns.vals.buf)
		v := append(ns.vals.buf, old...)
		v = binary.AppendUvarint(v, l.first-last)
		last = l.first
		for _, id := range l.rest {
			v = binary.AppendUvarint(v, id-last)
			last = id
		}
		ns.vals.buf = v
		ks[j].v = v[start:len(v):len(v)]
	}
	for _, e := range ks {
		if err := ns.post.Put([]byte(e.key), e.v); err != nil {
			return err
		}
	}
	return nil
}

// seekForward moves cursor c, at key ck (nil: not positioned, or past the
// end), to the first key at or after k, which is after every key it was
// moved to before: a few steps forward, then a seek.
func seekForward(c *bolt.Cursor, ck, cv, k []byte) ([]byte, []byte) {
	if ck == nil {
		return c.Seek(k)
	}
	for range 8 {
		if bytes.Compare(ck, k) >= 0 {
			return ck, cv
		}
		if ck, cv = c.Next(); ck == nil {
			return nil, nil // past the end, so is k
		}
	}
	if bytes.Compare(ck, k) >= 0 {
		return ck, cv
	}
	return c.Seek(k)
}

// valueArena holds values given to bbolt, which keeps them (not copies)
// until the transaction ends, many to an allocation.
type valueArena struct{ buf []byte }

func (a *valueArena) room(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(valueChunkBytes, n))
	}
}

// add returns a copy of v in the arena.
func (a *valueArena) add(v []byte) []byte {
	a.room(len(v))
	start := len(a.buf)
	a.buf = append(a.buf, v...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

func (a *valueArena) addString(s string) []byte {
	a.room(len(s))
	start := len(a.buf)
	a.buf = append(a.buf, s...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

const valueChunkBytes = 64 << 10

func decodePostings(v []byte) ([]uint64, error) {
	var out []uint64
	var id uint64
	for len(v) > 0 {
		d, n := binary.Uvarint(v)
		if n <= 0 {
			return nil, fmt.Errorf("%w: posting list", ErrCorrupt)
		}
		id += d
		out = append(out, id)
		v = v[n:]
	}
	return out, nil
}

// lastPosting returns the last id of a posting list (0: empty) without
// decoding it into a slice: a flush of new series reads every list they
// join, the metric's as long as the shard has series.
func lastPosting(v []byte) (uint64, error) {
	var id uint64
	for len(v) > 0 {
		d, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, fmt.Errorf("%w: posting list", ErrCorrupt)
		}
		id += d
		v = v[n:]
	}
	return id, nil
}

func blockKey(id uint64, minTS int64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, id)
	putTSKey(k[8:], minTS)
	return k
}

// blockReads counts decoded blocks, so tests can check that a query reads
// only the blocks it needs.
var blockReads atomic.Uint64

// seriesBlocks positions on the first block of series id that may hold points
// at or after ts, and calls fn for each block from there on until fn says stop.
func seriesBlocks(b *bolt.Bucket, id uint64, ts int64, fn func(k, v []byte, h blockHeader) (bool, error)) error {
	prefix := u64Key(id)
	c := b.Cursor()
	seek := blockKey(id, ts)
	k, v := c.Seek(seek)
	// The block before the seek position may still cover ts.
	pk, pv := prevOf(c, k)
	if pk != nil && bytes.HasPrefix(pk, prefix) {
		h, _, err := parseBlock(pv)
		if err != nil {
			return fmt.Errorf("block %x: %w", pk, err)
		}
		if h.maxTS >= ts {
			more, err := fn(pk, pv, h)
			if err != nil || !more {
				return err
			}
		}
	}
	// Back to the seek position: one step, not a second seek from the
	// root (a flush's merges and the packs' compaction do this for every
	// series they write).
	switch {
	case k == nil: // past the last key: nothing from ts on
	case pk != nil:
		k, v = c.Next()
	default: // k is the bucket's first key
		k, v = c.Seek(seek)
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		h, _, err := parseBlock(v)
		if err != nil {
			return fmt.Errorf("block %x: %w", k, err)
		}
		more, err := fn(k, v, h)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// prevOf moves the cursor to the entry before the one it was positioned on
// by Seek (k nil meaning past the end).
func prevOf(c *bolt.Cursor, k []byte) ([]byte, []byte) {
	if k == nil {
		return c.Last()
	}
	return c.Prev()
}

// readSeries decodes series id's points in [start, end], in its blocks and
// packs (and the sealed partitions ps reads), into a slice with room for
// extra more (the memtable's points, merged in after).
func readSeries(b *bolt.Bucket, ps packSrc, res *strResolver, id uint64, start, end int64, extra int) ([]SeriesPoint, error) {
	disk, typ, err := readMem(b, ps, id, start, end)
	if err != nil || len(disk) == 0 {
		return nil, err
	}
	out := make([]SeriesPoint, 0, len(disk)+extra)
	for _, p := range disk {
		sp, err := res.point(p, typ)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}

// readMem is readSeries' points as they are stored, with their type.
func readMem(b *bolt.Bucket, ps packSrc, id uint64, start, end int64) ([]memPoint, models.FieldType, error) {
	var disk, scratch []memPoint
	var typ models.FieldType
	err := seriesBlocks(b, id, start, func(_, v []byte, h blockHeader) (bool, error) {
		if h.minTS > end {
			return false, nil
		}
		blockReads.Add(1)
		var err error
		if scratch, typ, err = decodeBlock(scratch[:0], v); err != nil {
			return false, err
		}
		disk = append(disk, trimRange(scratch, h, start, end)...)
		return true, nil
	})
	if err != nil {
		return nil, typ, err
	}
	return ps.withPacked(disk, id, start, end, typ)
}

// blockPut writes the blocks of many series in one transaction: a flush
// writes a block or more for every series it holds, and one allocation
// for each block's key, value and recent-record was a cost per series.
type blockPut struct {
	blocks, recent *bolt.Bucket
	fromTxn        []byte // the recent bucket's value for every block; nil: none
	vals           valueArena
	scratch        []byte
}

func newBlockPut(tx *bolt.Tx, fromTxn uint64) *blockPut {
	bp := &blockPut{blocks: tx.Bucket(bucketBlocks), recent: tx.Bucket(bucketRecent)}
	bp.blocks.FillPercent = blockFill
	if fromTxn > 0 {
		bp.fromTxn = u64Key(fromTxn)
	}
	return bp
}

func (bp *blockPut) put(id uint64, pts []memPoint, typ models.FieldType) error {
	var k [16]byte // bbolt copies keys, not values
	for len(pts) > 0 {
		n := min(len(pts), maxBlockPoints)
		binary.BigEndian.PutUint64(k[:], id)
		putTSKey(k[8:], pts[0].ts)
		// Encoded in scratch, then copied: how many bytes a block takes is
		// only known after, and room for the worst case wasted most of
		// every chunk on well-compressed blocks.
		bp.scratch = encodeBlock(bp.scratch[:0], pts[:n], typ)
		if err := bp.blocks.Put(k[:], bp.vals.add(bp.scratch)); err != nil {
			return err
		}
		if bp.fromTxn != nil {
			if err := bp.recent.Put(k[:], bp.fromTxn); err != nil {
				return err
			}
		}
		pts = pts[n:]
	}
	return nil
}

func deleteBlock(tx *bolt.Tx, k []byte) error {
	if err := tx.Bucket(bucketBlocks).Delete(k); err != nil {
		return err
	}
	return tx.Bucket(bucketRecent).Delete(k)
}

// rewriteRange replaces series id's blocks that overlap [lo, hi] by the
// result of edit, which gets their points (sorted) and returns the new ones,
// written with bp: one per transaction, whose arena holds the values of all
// its blocks (an arena per call took a chunk for each series a flush merged).
// typ is the series' type, which its blocks must have.
// With pt, the packs the series' points leave are rewritten when pt is
// applied, not here (see packTakes).
func rewriteRange(tx *bolt.Tx, bp *blockPut, pt *packTakes, id uint64, typ models.FieldType, lo, hi int64, edit func([]memPoint) []memPoint) error {
	packed, ptyp, inPacks, err := takePacked(tx, id, lo, hi, pt)
	if err != nil {
		return err
	}
	if inPacks && ptyp != typ {
		return fmt.Errorf("%w: series %d holds packed %s points, not %s", ErrCorrupt, id, ptyp, typ)
	}
	return rewriteBlocks(tx, bp, id, typ, lo, hi, packed, edit)
}

// rewriteBlocks is rewriteRange over the series' blocks alone, with the
// points packed (sorted) merged under theirs.
func rewriteBlocks(tx *bolt.Tx, bp *blockPut, id uint64, typ models.FieldType, lo, hi int64, packed []memPoint, edit func([]memPoint) []memPoint) error {
	var old []memPoint
	var keys [][]byte
	err := seriesBlocks(tx.Bucket(bucketBlocks), id, lo, func(k, v []byte, h blockHeader) (bool, error) {
		if h.minTS > hi {
			return false, nil
		}
		if h.typ != typ {
			return false, fmt.Errorf("%w: series %d holds %s blocks, not %s", ErrCorrupt, id, h.typ, typ)
		}
		var err error
		old, _, err = decodeBlock(old, v)
		keys = append(keys, slices.Clone(k))
		return true, err
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := deleteBlock(tx, k); err != nil {
			return err
		}
	}
	if len(packed) > 0 {
		// Disjoint in time from the blocks' points, but for the copies a
		// compaction of packs under way made (packs.go): a block wins.
		old = mergeMem(packed, old, func(int64, uint64) {})
	}
	return bp.put(id, edit(old), typ)
}

// lastBlockMax returns the newest flushed ts of series id (ok false: none).
func lastBlockMax(b *bolt.Bucket, id uint64) (int64, bool, error) {
	c := b.Cursor()
	k, v := prevOf(c, firstKeyAfter(c, id))
	if k == nil || beUint64(k) != id {
		return 0, false, nil
	}
	h, _, err := parseBlock(v)
	if err != nil {
		return 0, false, fmt.Errorf("block %x: %w", k, err)
	}
	return h.maxTS, true, nil
}

func firstKeyAfter(c *bolt.Cursor, id uint64) []byte {
	k, _ := c.Seek(u64Key(id + 1))
	return k
}

// writeMemtable moves every memtable point into blocks. Points after a
// series' newest flushed one (the usual case) become new blocks; others are
// merged into the blocks they overlap. It returns the flushed values that
// were overwritten, keyed by (series, ts), for the undo records, and the
// series it created. With pack, the series with few points new after their
// newest flushed one go into packs (packs.go) instead of blocks of their own.
func writeMemtable(tx *bolt.Tx, ix *seriesIndex, mt *memtable, fromTxn uint64, pack bool) (prev map[memSlot]uint64, created []indexedSeries, merged bool, err error) {
	order, ids := flushOrder(ix, mt)
	prev = make(map[memSlot]uint64)
	newest := make([]seriesMax, 0, len(order))
	if len(mt.series) > 0 {
		ix.lastSeries.Store(int64(len(mt.series)))
		ix.lastPerSeries.Store(int64(mt.points / len(mt.series)))
	}
	ns := newSeries{tx: tx, hint: len(ids) - countKnown(ids)}
	if ns.hint > 0 {
		created = make([]indexedSeries, 0, ns.hint)
	}
	bp := newBlockPut(tx, fromTxn)
	rw := newBlockPut(tx, 0) // merged blocks: not rebuildable from the log alone
	var taken packTakes      // the packs merged series leave, rewritten once each
	var pk *packer
	if pack && len(packsOf(tx).load()) < packMaxCount {
		pk = &packer{recent: bp.fromTxn}
	}
	below := packBelow(len(mt.series))
	for _, idx := range order {
		ms := &mt.series[idx]
		if len(ms.pts) == 0 {
			continue
		}
		id, known := ids[idx], ids[idx] != 0
		if !known && len(ms.key) > MaxSeriesKeyBytes {
			// Only a log written before Append refused such keys holds
			// one (it failed every flush since): its points are dropped,
			// so that the shard can flush again.
			continue
		}
		if !known {
			if id, err = ns.create(ms.key); err != nil {
				return nil, nil, false, err
			}
			created = append(created, indexedSeries{ms.key, id})
		}
		last, any := ms.diskMax, ms.diskMax != math.MinInt64
		if !known {
			any = false
		} else if last == math.MaxInt64 {
			if last, any, err = lastFlushedMax(tx, id); err != nil {
				return nil, nil, false, err
			}
		}
		newest = append(newest, seriesMax{id, ms.pts[len(ms.pts)-1].ts})
		if any {
			newest[len(newest)-1].ts = max(last, ms.pts[len(ms.pts)-1].ts)
		}
		if !any || ms.pts[0].ts > last {
			if pk != nil && len(ms.pts) < below {
				if err := pk.addWriting(tx, id, ms.pts, ms.typ); err != nil {
					return nil, nil, false, err
				}
				continue
			}
			if err := bp.put(id, ms.pts, ms.typ); err != nil {
				return nil, nil, false, err
			}
			continue
		}
		merged = true
		err = rewriteRange(tx, rw, &taken, id, ms.typ, ms.pts[0].ts, ms.pts[len(ms.pts)-1].ts, func(old []memPoint) []memPoint {
			return mergeMem(old, ms.pts, func(ts int64, bits uint64) { prev[memSlot{idx, ts}] = bits })
		})
		if err != nil {
			return nil, nil, false, err
		}
	}
	if err := taken.apply(tx); err != nil {
		return nil, nil, false, err
	}
	if pk != nil {
		if err := pk.write(tx); err != nil {
			return nil, nil, false, err
		}
	}
	if err := ns.finish(); err != nil {
		return nil, nil, false, err
	}
	if err := saveStrs(tx, mt); err != nil {
		return nil, nil, false, err
	}
	if err := ix.ft.save(tx); err != nil {
		return nil, nil, false, err
	}
	// Recorded before the commit: if it fails, the bound is only higher
	// than what is on disk, which is all the memtable and the next flush
	// need of it.
	ix.setNewest(newest)
	return prev, created, merged, nil
}

// flushOrder lists the memtable's series in the order a flush writes them,
// with their ids (0: not indexed yet), looked up under one lock: the known
// series by id, since block keys are id | ts and the puts then walk the
// blocks bucket's pages once, in order (in key order, with series created
// by many flushes, they jumped between pages: a seek from the root each);
// then the new series by key, which is the order they get their ids in,
// above every known one. The memtable knows the ids of the series that had
// one when they came in; only the others are looked up.
func flushOrder(ix *seriesIndex, mt *memtable) (order []int32, ids []uint64) {
	order = make([]int32, len(mt.series))
	ids = make([]uint64, len(mt.series))
	copy(ids, mt.ids)
	ix.mu.RLock()
	for i := range mt.series {
		order[i] = int32(i)
		if ids[i] == 0 {
			ids[i] = ix.ids[mt.series[i].key]
		}
	}
	ix.mu.RUnlock()
	slices.SortFunc(order, func(a, b int32) int {
		ia, ib := ids[a], ids[b]
		switch {
		case ia != 0 && ib != 0:
			return cmp.Compare(ia, ib)
		case ia != 0 || ib != 0:
			return cmp.Compare(ib, ia) // the known one (id > 0) first
		}
		return strings.Compare(mt.series[a].key, mt.series[b].key)
	})
	return order, ids
}

// countKnown counts the ids above 0.
func countKnown(ids []uint64) int {
	n := 0
	for _, id := range ids {
		if id != 0 {
			n++
		}
	}
	return n
}

// mergeMem merges two sorted point lists, newer winning on the same ts, and
// reports each older value it replaced.
func mergeMem(older, newer []memPoint, replaced func(ts int64, bits uint64)) []memPoint {
	return mergeSorted(older, newer, func(p memPoint) int64 { return p.ts }, func(p memPoint) { replaced(p.ts, p.bits) })
}

// undoEntries rolls back the flushed entries (to, to+len(entries)], given in
// order, newest first, with their undo records, rewriting the blocks of each
// series they touched once, and removes their undo records.
func undoEntries(tx *bolt.Tx, ix *seriesIndex, to uint64, entries []Entry) error {
	undoB := tx.Bucket(bucketUndo)
	type op struct {
		ts      int64
		hadPrev bool
		prev    uint64
		typ     models.FieldType
	}
	bySeries := make(map[string][]op)
	for i, e := range slices.Backward(entries) {
		t := to + uint64(i) + 1
		k := u64Key(t)
		if e.TxnID != t {
			return fmt.Errorf("%w: undo txn %d, log gave %d", ErrCorrupt, t, e.TxnID)
		}
		ops, err := decodeUndo(undoB.Get(k), len(e.Points))
		if err != nil {
			return fmt.Errorf("undo txn %d: %w", t, err)
		}
		var key []byte
		for _, u := range slices.Backward(ops) {
			p := &e.Points[u.point]
			key = lineproto.AppendSeriesKey(key[:0], p.Metric, p.Tags, p.Field)
			bySeries[string(key)] = append(bySeries[string(key)], op{p.TS, u.hadPrev, u.prev, p.Type})
		}
		if err := undoB.Delete(k); err != nil {
			return err
		}
	}
	rw := newBlockPut(tx, 0)
	for key, ops := range bySeries {
		id, ok := ix.id(key)
		if !ok {
			return fmt.Errorf("%w: flushed series %q not indexed", ErrCorrupt, key)
		}
		lo, hi := ops[0].ts, ops[0].ts
		for _, o := range ops {
			lo, hi = min(lo, o.ts), max(hi, o.ts)
		}
		err := rewriteRange(tx, rw, nil, id, ops[0].typ, lo, hi, func(old []memPoint) []memPoint {
			state := make(map[int64]uint64, len(old))
			for _, p := range old {
				state[p.ts] = p.bits
			}
			// Newest first: the oldest entry's record, applied last, wins.
			for _, o := range ops {
				if o.hadPrev {
					state[o.ts] = o.prev
				} else {
					delete(state, o.ts)
				}
			}
			out := make([]memPoint, 0, len(state))
			for ts, bits := range state {
				out = append(out, memPoint{ts, bits})
			}
			slices.SortFunc(out, func(a, b memPoint) int { return cmpPointTS(a, b.ts) })
			return out
		})
		if err != nil {
			return err
		}
		if err := rollupRange(tx, id, lo, hi, false); err != nil {
			return err
		}
	}
	return nil
}
