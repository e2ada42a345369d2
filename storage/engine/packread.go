package engine

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// packSrc reads series' packed points in one transaction: the packs bucket
// (nil: the file has none) and the heads of its packs.
type packSrc struct {
	b       *bolt.Bucket
	heads   []packHead
	sealed  sealedView  // the sealed partitions read under (readSource)
	checked *packsCheck // the packs whose checksum this source verified
}

func packSource(tx *bolt.Tx) packSrc {
	b := tx.Bucket(bucketPacks)
	if b == nil {
		return packSrc{}
	}
	return packSrc{b: b, heads: packsOf(tx).load(), checked: &packsCheck{}}
}

// packsCheck remembers the packs a source has parsed and checked, by seq
// and the bytes checked, so a read of many series of one pack (a query, a
// flush that merges, a seal step) checks the pack's checksum once, not once
// per series: that was O(series x pack) and, with a pack of 20k series, most
// of a node's CPU. A pack rewritten in the transaction reads as other bytes,
// and is checked again.
type packsCheck struct {
	bySeq map[uint64]checkedPack
}

type checkedPack struct {
	v         []byte // the bytes checked
	dir, data []byte
}

// parse is parsePack of pack seq's bytes v, checked once per source.
func (pc *packsCheck) parse(seq uint64, v []byte) (dir, data []byte, err error) {
	if c, ok := pc.bySeq[seq]; ok && len(c.v) == len(v) && unsafe.SliceData(c.v) == unsafe.SliceData(v) {
		return c.dir, c.data, nil
	}
	if _, dir, data, err = parsePack(v); err != nil {
		return nil, nil, err
	}
	if pc.bySeq == nil {
		pc.bySeq = map[uint64]checkedPack{}
	}
	pc.bySeq[seq] = checkedPack{v, dir, data}
	return dir, data, nil
}

// readSource is packSource with the sealed partitions that overlap [lo,
// hi] read under the shard file's points: what a read of the range takes.
// Call done when the read ends.
func readSource(tx *bolt.Tx, lo, hi int64) (ps packSrc, done func(), err error) {
	ps = packSource(tx)
	if ps.sealed, err = openSealed(tx, lo, hi); err != nil {
		return ps, nil, err
	}
	return ps, ps.sealed.close, nil
}

// each calls fn with series id's block of every pack whose head covers
// [start, end], in pack order (which is time order for one series).
func (ps packSrc) each(id uint64, start, end int64, fn func(seq uint64, pack, block []byte) error) error {
	for _, h := range ps.heads {
		if !h.covers(id, start, end) {
			continue
		}
		v := ps.b.Get(u64Key(h.seq))
		if v == nil {
			continue // not in this transaction (emptied, or a flush not committed)
		}
		dir, data, err := ps.checked.parse(h.seq, v)
		if err != nil {
			return fmt.Errorf("pack %d: %w", h.seq, err)
		}
		blk, err := blockInPack(dir, data, id)
		if err != nil {
			return fmt.Errorf("pack %d: %w", h.seq, err)
		}
		if blk == nil {
			continue
		}
		if err := fn(h.seq, v, blk); err != nil {
			return err
		}
	}
	return nil
}

// appendPoints appends series id's packed points in [start, end] to dst, in
// time order, and their type (ok false: none).
func (ps packSrc) appendPoints(dst []memPoint, id uint64, start, end int64) ([]memPoint, models.FieldType, bool, error) {
	if ps.b == nil {
		return dst, 0, false, nil
	}
	var typ models.FieldType
	found := false
	var scratch []memPoint
	err := ps.each(id, start, end, func(seq uint64, _, blk []byte) error {
		h, _, err := parseBlock(blk)
		if err != nil {
			return fmt.Errorf("pack %d series %d: %w", seq, id, err)
		}
		if h.count == 0 || h.maxTS < start || h.minTS > end {
			return nil
		}
		blockReads.Add(1)
		if scratch, typ, err = decodeBlock(scratch[:0], blk); err != nil {
			return fmt.Errorf("pack %d series %d: %w", seq, id, err)
		}
		found = true
		dst = append(dst, trimRange(scratch, h, start, end)...)
		return nil
	})
	return dst, typ, found, err
}

// trimRange drops the points of a decoded block outside [start, end].
func trimRange(pts []memPoint, h blockHeader, start, end int64) []memPoint {
	if h.minTS < start {
		i, _ := slices.BinarySearchFunc(pts, start, cmpPointTS)
		pts = pts[i:]
	}
	if h.maxTS > end {
		i, found := slices.BinarySearchFunc(pts, end, cmpPointTS)
		if found {
			i++
		}
		pts = pts[:i]
	}
	return pts
}

// withPacked merges series id's packed points in [start, end] into its
// block points disk (sorted), and returns the type of the packed ones when
// disk was empty.
func (ps packSrc) withPacked(disk []memPoint, id uint64, start, end int64, typ models.FieldType) ([]memPoint, models.FieldType, error) {
	packed, ptyp, ok, err := ps.appendPoints(nil, id, start, end)
	if err != nil {
		return disk, typ, err
	}
	switch {
	case ok && len(disk) == 0:
		disk, typ = packed, ptyp
	case ok:
		// Disjoint in time (see packs.go); a block would win a shared ts.
		disk = mergeMem(packed, disk, func(int64, uint64) {})
	}
	return ps.sealed.under(disk, id, start, end, typ)
}

// packedSpan is the oldest and newest packed ts of series id (ok false:
// none).
func packedSpan(tx *bolt.Tx, id uint64) (first, last int64, ok bool, err error) {
	ps := packSource(tx)
	if ps.b == nil {
		return 0, 0, false, nil
	}
	err = ps.each(id, math.MinInt64, math.MaxInt64, func(seq uint64, _, blk []byte) error {
		h, _, err := parseBlock(blk)
		if err != nil {
			return fmt.Errorf("pack %d series %d: %w", seq, id, err)
		}
		if h.count == 0 {
			return nil
		}
		if !ok {
			first, last, ok = h.minTS, h.maxTS, true
		}
		first, last = min(first, h.minTS), max(last, h.maxTS)
		return nil
	})
	return first, last, ok, err
}

func lastPackedMax(tx *bolt.Tx, id uint64) (int64, bool, error) {
	_, last, ok, err := packedSpan(tx, id)
	return last, ok, err
}

// flushedSpan is the oldest and newest flushed ts of series id, in its
// blocks, packs or sealed partitions (ok false: none).
func flushedSpan(tx *bolt.Tx, id uint64) (first, last int64, ok bool, err error) {
	first, last = math.MaxInt64, math.MinInt64
	widen := func(lo, hi int64) { first, last, ok = min(first, lo), max(last, hi), true }
	blocks := tx.Bucket(bucketBlocks)
	if k, _ := blocks.Cursor().Seek(blockKey(id, math.MinInt64)); k != nil && beUint64(k) == id {
		blast, _, err := lastBlockMax(blocks, id)
		if err != nil {
			return 0, 0, false, err
		}
		widen(tsFromKey(k[8:]), blast)
	}
	pfirst, plast, pok, err := packedSpan(tx, id)
	if err != nil {
		return 0, 0, false, err
	}
	if pok {
		widen(pfirst, plast)
	}
	sv, err := openSealed(tx, math.MinInt64, math.MaxInt64)
	if err != nil {
		return 0, 0, false, err
	}
	defer sv.close()
	if err := sv.span(id, widen); err != nil {
		return 0, 0, false, err
	}
	return first, last, ok, nil
}

// lastFlushedMax is the newest flushed ts of series id, in its blocks or
// packs (ok false: none).
func lastFlushedMax(tx *bolt.Tx, id uint64) (int64, bool, error) {
	last, ok, err := lastBlockMax(tx.Bucket(bucketBlocks), id)
	if err != nil {
		return 0, false, err
	}
	plast, pok, err := lastPackedMax(tx, id)
	if err != nil || !pok {
		return last, ok, err
	}
	return max(last, plast), true, nil
}

// takePacked removes series id's packed blocks that overlap [lo, hi] from
// their packs and returns their points (sorted) and type (ok false: none),
// for a rewrite of the range to put among the series' own blocks. Only a
// flush of points older than a series' newest, a rollback, a delete or the
// compaction of packs gets here. With pt, the packs are not rewritten here
// but once each when pt is applied (see packTakes); without, at once.
func takePacked(tx *bolt.Tx, id uint64, lo, hi int64, pt *packTakes) ([]memPoint, models.FieldType, bool, error) {
	ps := packSource(tx)
	if ps.b == nil {
		return nil, 0, false, nil
	}
	if pt != nil {
		ps.checked = &pt.checked // one check per pack for the transaction's takes
	}
	type take struct {
		seq  uint64
		pack []byte
	}
	var takes []take
	var pts []memPoint
	var typ models.FieldType
	err := ps.each(id, lo, hi, func(seq uint64, pack, blk []byte) error {
		if pt.taken(seq, id) {
			return nil // already moved to the series' blocks in this transaction
		}
		h, _, err := parseBlock(blk)
		if err != nil {
			return fmt.Errorf("pack %d series %d: %w", seq, id, err)
		}
		if h.count == 0 || h.maxTS < lo || h.minTS > hi {
			return nil
		}
		if pts, typ, err = decodeBlock(pts, blk); err != nil {
			return fmt.Errorf("pack %d series %d: %w", seq, id, err)
		}
		takes = append(takes, take{seq, pack})
		return nil
	})
	if err != nil || len(takes) == 0 {
		return nil, 0, false, err
	}
	for _, t := range takes {
		if pt != nil {
			pt.add(t.seq, id)
			continue
		}
		if err := dropFromPack(ps.b, t.seq, t.pack, map[uint64]bool{id: true}); err != nil {
			return nil, 0, false, err
		}
	}
	return pts, typ, true, nil
}

// packTakes collects the series a transaction takes out of packs, so that a
// flush over many series of one pack (a resend of points already flushed, a
// backfill) rewrites each pack once: rewriting it once per series taken cost
// O(series x pack) and took a node writing 160k series again from 1.2M
// points/s down to 0.12M. A series taken stays in its pack's bytes until
// apply, but takePacked skips it there; nothing else in the transaction may
// read the series' packed points in between.
type packTakes struct {
	bySeq   map[uint64]map[uint64]bool // pack seq -> series ids taken
	checked packsCheck                 // the packs read for the takes
}

func (pt *packTakes) taken(seq, id uint64) bool {
	return pt != nil && pt.bySeq[seq][id]
}

func (pt *packTakes) add(seq, id uint64) {
	if pt.bySeq == nil {
		pt.bySeq = map[uint64]map[uint64]bool{}
	}
	ids := pt.bySeq[seq]
	if ids == nil {
		ids = map[uint64]bool{}
		pt.bySeq[seq] = ids
	}
	ids[id] = true
}

// apply rewrites each pack once without the series taken from it.
func (pt *packTakes) apply(tx *bolt.Tx) error {
	if len(pt.bySeq) == 0 {
		return nil
	}
	b := tx.Bucket(bucketPacks)
	for _, seq := range slices.Sorted(maps.Keys(pt.bySeq)) {
		v := b.Get(u64Key(seq))
		if v == nil {
			return fmt.Errorf("%w: pack %d gone before the series taken from it were dropped", ErrCorrupt, seq)
		}
		if err := dropFromPack(b, seq, v, pt.bySeq[seq]); err != nil {
			return err
		}
	}
	pt.bySeq, pt.checked = nil, packsCheck{}
	return nil
}

// packRewrites counts the packs rewritten or deleted for series taken out
// of them (a cost test reads it).
var packRewrites atomic.Uint64

// dropFromPack rewrites pack seq without the blocks of the series ids, or
// deletes it once it holds no series. Its head keeps the wider ranges (see
// packList).
func dropFromPack(b *bolt.Bucket, seq uint64, v []byte, ids map[uint64]bool) error {
	packRewrites.Add(1)
	h, dir, data, err := parsePack(v)
	if err != nil {
		return err
	}
	var p packer
	start := 0
	for i := 0; i < len(dir); i += packDirEntry {
		sid := binary.BigEndian.Uint64(dir[i:])
		end := int(binary.BigEndian.Uint32(dir[i+8:]))
		if !ids[sid] {
			p.data = append(p.data, data[start:end]...)
			p.ids = append(p.ids, sid)
			p.ends = append(p.ends, uint32(len(p.data)))
		}
		start = end
	}
	if len(p.ids) == 0 {
		return b.Delete(u64Key(seq))
	}
	p.head = h
	p.head.minID, p.head.maxID = p.ids[0], p.ids[len(p.ids)-1]
	return b.Put(u64Key(seq), p.encode())
}
