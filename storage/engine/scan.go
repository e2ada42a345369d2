package engine

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Scanner is the streaming read that aggregation queries use: series come
// one at a time with their points in a buffer the scan reuses, so a query
// over millions of points allocates per series at most, never per point, and
// holds one series' points at a time. The shards of NewBoltEngine implement
// it (type-assert a Shard).
type Scanner interface {
	// Scan offers each candidate series of metric to keep, by its lineproto
	// series key, before reading any of its points; for each kept series
	// that has points in [start, end] it calls visit with them, sorted by
	// ts (memtable points win over flushed ones at the same ts). Candidates
	// come from the posting lists of match's terms (every series of metric
	// when match is empty): each series holding all of match is offered,
	// and keep must check whatever else it needs. Series are visited in key
	// order. pts is only valid during visit; an error from visit ends the
	// scan and is returned.
	Scan(metric string, match map[string]string, start, end int64, keep func(key string) bool, visit func(key string, pts []SeriesPoint) error) error
}

// BlockReads is how many blocks this process has decoded, for tests and
// metrics that check a query reads only the blocks it needs.
func BlockReads() uint64 { return blockReads.Load() }

// memRun is one kept memtable series' points in the range, copied out.
type memRun struct {
	key string
	pts []memPoint
	typ models.FieldType
}

func (s *boltShard) Scan(metric string, match map[string]string, start, end int64, keep func(string) bool, visit func(string, []SeriesPoint) error) error {
	if start > end {
		return nil
	}
	err := s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		// s.ix is stable while viewMems holds mu (see QueryLimited).
		hideBlocks, hideFrozen := m.pending()
		runs, views, err := m.scanCopy(metric, start, end, keep, hideFrozen)
		if err != nil {
			return err
		}
		flushed, err := s.candidatesByKey(tx, metric, match)
		if err != nil {
			return err
		}
		ps, done, err := readSource(tx, start, end)
		if err != nil {
			return err
		}
		defer done()
		sc := scanner{blocks: tx.Bucket(bucketBlocks), packs: ps, start: start, end: end,
			res: strResolver{mems: views, bucket: tx.Bucket(bucketStrs)}}
		for _, fs := range flushed {
			for len(runs) > 0 && runs[0].key < fs.key {
				if err := sc.visitRun(runs[0], visit); err != nil {
					return err
				}
				runs = runs[1:]
			}
			var mem []memPoint
			inMem := len(runs) > 0 && runs[0].key == fs.key
			if inMem {
				mem = runs[0].pts
			} else if !keep(fs.key) {
				continue
			}
			if err := sc.read(fs.id); err != nil {
				return fmt.Errorf("series %q: %w", fs.key, err)
			}
			if len(hideBlocks) > 0 {
				r, err := hideBlocks.ranges(fs.key)
				if err != nil {
					return err
				}
				sc.disk = hideMem(sc.disk, r)
			}
			if inMem {
				sc.typ = runs[0].typ // the same as its blocks'
				runs = runs[1:]
			}
			pts, err := sc.points(sc.disk, mem)
			if err != nil {
				return fmt.Errorf("series %q: %w", fs.key, err)
			}
			if len(pts) > 0 {
				if err := visit(fs.key, pts); err != nil {
					return err
				}
			}
		}
		for _, r := range runs {
			if err := sc.visitRun(r, visit); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("engine: scan %q: %w", metric, err)
	}
	return nil
}

// seriesKey is series id's key, from the index or else the shard file's
// bucket of keys (skey).
func (s *boltShard) seriesKey(skey *bolt.Bucket, id uint64) (string, error) {
	if key, ok := s.ix.keyOf(id); ok {
		return key, nil
	}
	v := skey.Get(u64Key(id))
	if v == nil {
		return "", fmt.Errorf("%w: posting for unknown series %d", ErrCorrupt, id)
	}
	return string(v), nil
}

// candidateIDs intersects the posting lists of metric and of every term of
// candidatesByKey are the flushed series of metric that may match, with
// their keys, in key order.
func (s *boltShard) candidatesByKey(tx *bolt.Tx, metric string, match map[string]string) ([]flushedRef, error) {
	ids, err := candidateIDs(tx, metric, match)
	if err != nil {
		return nil, err
	}
	out := make([]flushedRef, 0, len(ids))
	skey := tx.Bucket(bucketSKey)
	for _, id := range ids {
		key, err := s.seriesKey(skey, id)
		if err != nil {
			return nil, err
		}
		out = append(out, flushedRef{id, key})
	}
	slices.SortFunc(out, func(a, b flushedRef) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// match; sorted.
func candidateIDs(tx *bolt.Tx, metric string, match map[string]string) ([]uint64, error) {
	post := tx.Bucket(bucketPost)
	lists := [][]byte{postingPrefix(postMetric, metric)}
	for k, v := range match {
		if k == FieldTag {
			lists = append(lists, postingPrefix(postField, metric, v))
		} else {
			lists = append(lists, postingPrefix(postTag, metric, k, v))
		}
	}
	if len(lists) > 1 {
		lists = lists[1:] // every term's list is within the metric's
	}
	var ids []uint64
	for i, k := range lists {
		l, err := decodePostings(post.Get(k))
		if err != nil {
			return nil, err
		}
		if i == 0 {
			ids = l
			continue
		}
		ids = intersectSorted(ids, l)
	}
	return ids, nil
}

// intersectSorted keeps the ids of a that are in b (both sorted), in place.
func intersectSorted(a, b []uint64) []uint64 {
	out := a[:0]
	j := 0
	for _, id := range a {
		for j < len(b) && b[j] < id {
			j++
		}
		if j < len(b) && b[j] == id {
			out = append(out, id)
		}
	}
	return out
}

// scanCopy copies out the points in [start, end] of the memtable series of
// metric that keep accepts, sorted by key; one allocation holds them all.
// keep runs under the memtable's read lock.
func (mt *memtable) scanCopy(metric string, start, end int64, keep func(string) bool) ([]memRun, strView) {
	mt.mu.RLock()
	defer mt.mu.RUnlock()
	type span struct {
		ms     *memSeries
		lo, hi int
	}
	var spans []span
	total := 0
	for _, idx := range mt.byMetric[metric] {
		ms := &mt.series[idx]
		lo, hi := ms.span(start, end)
		if lo >= hi || !keep(ms.key) {
			continue
		}
		spans = append(spans, span{ms, lo, hi})
		total += hi - lo
	}
	buf := make([]memPoint, 0, total)
	runs := make([]memRun, len(spans))
	for i, sp := range spans {
		n := len(buf)
		buf = append(buf, sp.ms.pts[sp.lo:sp.hi]...)
		runs[i] = memRun{key: sp.ms.key, pts: buf[n:len(buf):len(buf)], typ: sp.ms.typ}
	}
	slices.SortFunc(runs, func(a, b memRun) int { return strings.Compare(a.key, b.key) })
	return runs, mt.strView()
}

// scanner reads series blocks into buffers it reuses from series to series.
type scanner struct {
	blocks     *bolt.Bucket
	packs      packSrc
	start, end int64
	scratch    []memPoint // one decoded block
	disk       []memPoint // the series' flushed points in range
	typ        models.FieldType
	out        []SeriesPoint
	res        strResolver
}

// visitRun visits a series only the memtables hold.
func (sc *scanner) visitRun(r memRun, visit func(string, []SeriesPoint) error) error {
	sc.typ = r.typ
	pts, err := sc.points(nil, r.pts)
	if err != nil {
		return fmt.Errorf("series %q: %w", r.key, err)
	}
	return visit(r.key, pts)
}

// read decodes series id's flushed points in [start, end] into sc.disk,
// decoding only the blocks that overlap the range: a block's key holds its
// first ts and its header its last, so the walk starts at the block before
// the first one at or after start and stops at the first starting past end.
func (sc *scanner) read(id uint64) error {
	sc.disk, sc.typ = sc.disk[:0], models.FieldFloat
	prefix := u64Key(id)
	c := sc.blocks.Cursor()
	seek := blockKey(id, sc.start)
	k, _ := c.Seek(seek)
	if pk, pv := prevOf(c, k); pk != nil && bytes.HasPrefix(pk, prefix) {
		if err := sc.block(pk, pv); err != nil {
			return err
		}
	}
	for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if tsFromKey(k[8:]) > sc.end {
			break
		}
		if err := sc.block(k, v); err != nil {
			return err
		}
	}
	var err error
	sc.disk, sc.typ, err = sc.packs.withPacked(sc.disk, id, sc.start, sc.end, sc.typ)
	return err
}

// block appends the points of one block that fall in the range, decoding it
// only if its time span overlaps the range.
func (sc *scanner) block(k, v []byte) error {
	h, _, err := parseBlock(v)
	if err != nil {
		return fmt.Errorf("block %x: %w", k, err)
	}
	if h.count == 0 || h.maxTS < sc.start || h.minTS > sc.end {
		return nil
	}
	blockReads.Add(1)
	if sc.scratch, sc.typ, err = decodeBlock(sc.scratch[:0], v); err != nil {
		return fmt.Errorf("block %x: %w", k, err)
	}
	pts := sc.scratch
	if h.minTS < sc.start {
		i, _ := slices.BinarySearchFunc(pts, sc.start, cmpPointTS)
		pts = pts[i:]
	}
	if h.maxTS > sc.end {
		i, found := slices.BinarySearchFunc(pts, sc.end, cmpPointTS)
		if found {
			i++
		}
		pts = pts[:i]
	}
	sc.disk = append(sc.disk, pts...)
	return nil
}

// points merges flushed and memtable points (both sorted; the memtable wins
// on the same ts) into the reused output buffer.
func (sc *scanner) points(disk, mem []memPoint) ([]SeriesPoint, error) {
	out := sc.out[:0]
	i, j := 0, 0
	for i < len(disk) || j < len(mem) {
		var p memPoint
		switch {
		case j == len(mem) || i < len(disk) && disk[i].ts < mem[j].ts:
			p = disk[i]
			i++
		case i == len(disk) || mem[j].ts < disk[i].ts:
			p = mem[j]
			j++
		default:
			p = mem[j]
			i++
			j++
		}
		sp, err := sc.res.point(p, sc.typ)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	sc.out = out
	return out, nil
}
