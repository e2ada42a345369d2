package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Rollup levels (the database's "rollups") are kept in the shard file beside
// the blocks, one bucket per level, keyed like blocks (series id | cell
// start) with one cell per series and interval: count, sum, min, max, first
// and last of its points (models.RollupCell), for float, integer and
// unsigned fields; booleans and strings are not rolled up. The levels are in
// the meta bucket (rollup_levels), so a flush reads them in its own
// transaction and a snapshot carries them with the cells.
//
// A flush brings the cells of the points it wrote up to date in its commit:
// a cell whose points all come before the new ones (the usual case, and a
// late point for a bucket already rolled whose time is past the cell's
// last) is merged with them, reading nothing; a cell the new points fall
// inside (a point written again, or late into the middle) is recomputed from
// its source, the raw blocks for the finest level and the finer level's
// cells for the others, since a merge would count an overwritten point
// twice. Cells are so a function of the points the shard holds, whatever
// the flush boundaries, and every replica, which flushes the same log by its
// own schedule, computes the same ones: nothing about rollups is replicated
// but the points.
//
// Once a source has expired under a cell (raw_floor, rollup_floor_<level>:
// the newest cutoff that dropped points there), the cell is the only
// record: new points are merged into it (an overwritten point there counts
// twice), and a delete or rollback that touches it drops it whole, so a
// rollup never answers a deleted point. Deletes and rollbacks recompute
// the cells they touch above the floor.
var (
	keyRollupLevels = []byte("rollup_levels") // u64 BE interval (ns) per level, finest first
	keyRawFloor     = []byte("raw_floor")     // i64 BE (as u64): raw points before it may be gone
)

func rollupBucket(iv int64) []byte   { return []byte("rollup_" + strconv.FormatInt(iv, 10)) }
func rollupFloorKey(iv int64) []byte { return []byte("rollup_floor_" + strconv.FormatInt(iv, 10)) }

// rollupLevels are the shard's level intervals in ns, finest first.
func rollupLevels(tx *bolt.Tx) []int64 {
	v := tx.Bucket(bucketMeta).Get(keyRollupLevels)
	out := make([]int64, 0, len(v)/8)
	for ; len(v) >= 8; v = v[8:] {
		out = append(out, int64(beUint64(v)))
	}
	return out
}

// metaFloor is a floor kept in meta (math.MinInt64: none).
func metaFloor(tx *bolt.Tx, key []byte) int64 {
	if v := tx.Bucket(bucketMeta).Get(key); len(v) == 8 {
		return int64(beUint64(v))
	}
	return math.MinInt64
}

// raiseFloor moves the floor at key up to ts.
func raiseFloor(tx *bolt.Tx, key []byte, ts int64) error {
	if ts <= metaFloor(tx, key) {
		return nil
	}
	return tx.Bucket(bucketMeta).Put(key, u64Key(uint64(ts)))
}

// rollupLevel is one level as an update transaction sees it.
type rollupLevel struct {
	iv    int64
	b     *bolt.Bucket
	floor int64 // its source may have lost points before it
}

// openLevels opens the shard's levels for an update (creating a bucket a
// file restored from a snapshot of an older version lacks).
func openLevels(tx *bolt.Tx) ([]rollupLevel, error) {
	ivs := rollupLevels(tx)
	out := make([]rollupLevel, len(ivs))
	floor := metaFloor(tx, keyRawFloor)
	for i, iv := range ivs {
		b, err := tx.CreateBucketIfNotExists(rollupBucket(iv))
		if err != nil {
			return nil, err
		}
		out[i] = rollupLevel{iv: iv, b: b, floor: floor}
		floor = max(floor, metaFloor(tx, rollupFloorKey(iv)))
	}
	return out, nil
}

// cellBytes is an encoded cell: type, count, then sum, min, max, first, last
// and the times of min, max, first, last, 8 bytes each.
const cellBytes = 1 + 8 + 9*8

func encodeCell(c models.RollupCell) []byte {
	b := make([]byte, 0, cellBytes)
	b = append(b, byte(c.Type))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Count))
	for _, f := range []float64{c.Sum, c.Min, c.Max, c.First, c.Last} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	for _, ts := range []int64{c.MinTS, c.MaxTS, c.FirstTS, c.LastTS} {
		b = binary.BigEndian.AppendUint64(b, uint64(ts))
	}
	return b
}

func decodeCell(k, v []byte) (models.RollupCell, error) {
	if len(k) != 16 || len(v) != cellBytes {
		return models.RollupCell{}, fmt.Errorf("%w: rollup cell %x", ErrCorrupt, k)
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(v[1+8*i:]) }
	f := func(i int) float64 { return math.Float64frombits(u(i)) }
	return models.RollupCell{Start: tsFromKey(k[8:]), Type: models.FieldType(v[0]), Count: int64(u(0)),
		Sum: f(1), Min: f(2), Max: f(3), First: f(4), Last: f(5),
		MinTS: int64(u(6)), MaxTS: int64(u(7)), FirstTS: int64(u(8)), LastTS: int64(u(9))}, nil
}

// cellStart is the start of the cell of interval iv holding ts.
func cellStart(ts, iv int64) int64 {
	q := ts / iv
	if ts%iv < 0 {
		q--
	}
	return q * iv
}

// putCell writes c, or removes its key when it holds no point.
func putCell(b *bolt.Bucket, id uint64, c models.RollupCell) error {
	k := blockKey(id, c.Start)
	if c.Count == 0 {
		return b.Delete(k)
	}
	return b.Put(k, encodeCell(c))
}

func getCell(b *bolt.Bucket, id uint64, start int64, typ models.FieldType) (models.RollupCell, bool, error) {
	k := blockKey(id, start)
	v := b.Get(k)
	if v == nil {
		return models.RollupCell{Start: start, Type: typ}, false, nil
	}
	c, err := decodeCell(k, v)
	return c, true, err
}

func pointValue(p memPoint, typ models.FieldType) float64 {
	return models.TypedPoint(p.ts, typ, p.bits, "").Value
}

// rollupFlush brings the cells of the points a flush wrote up to date, in
// its transaction, after its blocks. created are the series the flush made
// (not in the index yet).
func rollupFlush(tx *bolt.Tx, ix *seriesIndex, mt *memtable, created []indexedSeries) error {
	levels, err := openLevels(tx)
	if err != nil || len(levels) == 0 {
		return err
	}
	made := make(map[string]uint64, len(created))
	for _, c := range created {
		made[c.key] = c.id
	}
	for i := range mt.series {
		ms := &mt.series[i]
		if len(ms.pts) == 0 || !ms.typ.Numeric() {
			continue
		}
		id, ok := ix.id(ms.key)
		if !ok {
			if id, ok = made[ms.key]; !ok {
				continue // a key too long to keep (writeMemtable dropped it)
			}
		}
		if err := rollupPoints(levels, tx, id, ms.typ, ms.pts); err != nil {
			return fmt.Errorf("rollup of series %d: %w", id, err)
		}
	}
	return nil
}

// rollupPoints folds pts (sorted, just written to series id's blocks) into
// every level's cells.
func rollupPoints(levels []rollupLevel, tx *bolt.Tx, id uint64, typ models.FieldType, pts []memPoint) error {
	for li, lv := range levels {
		rest := pts
		for len(rest) > 0 {
			start := cellStart(rest[0].ts, lv.iv)
			n := 1
			for n < len(rest) && rest[n].ts < start+lv.iv {
				n++
			}
			run := rest[:n]
			rest = rest[n:]
			c, found, err := getCell(lv.b, id, start, typ)
			if err != nil {
				return err
			}
			if found && c.LastTS >= run[0].ts && start >= lv.floor {
				// Inside the cell's points: a merge could count one twice.
				if err := recomputeCell(levels, li, tx, id, typ, start); err != nil {
					return err
				}
				continue
			}
			for _, p := range run {
				c.Add(p.ts, pointValue(p, typ))
			}
			if err := putCell(lv.b, id, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// recomputeCell computes level li's cell of series id at start again from
// its source: the raw blocks for level 0, else level li-1's cells.
func recomputeCell(levels []rollupLevel, li int, tx *bolt.Tx, id uint64, typ models.FieldType, start int64) error {
	lv := levels[li]
	c := models.RollupCell{Start: start, Type: typ}
	end := start + lv.iv - 1
	if li > 0 {
		src := levels[li-1].b.Cursor()
		prefix := u64Key(id)
		for k, v := src.Seek(blockKey(id, start)); k != nil && bytes.HasPrefix(k, prefix) && tsFromKey(k[8:]) <= end; k, v = src.Next() {
			o, err := decodeCell(k, v)
			if err != nil {
				return err
			}
			c.Merge(o)
		}
		return putCell(lv.b, id, c)
	}
	// The raw points as Query reads them (readSeries): a flush's cells see
	// whatever a read of the blocks sees.
	ps, done, err := readSource(tx, start, end)
	if err != nil {
		return err
	}
	defer done()
	pts, err := readSeries(tx.Bucket(bucketBlocks), ps, &strResolver{}, id, start, end, 0)
	if err != nil {
		return err
	}
	for _, p := range pts {
		if p.Type.Numeric() {
			c.Add(p.TS, p.Value)
		}
	}
	return putCell(lv.b, id, c)
}

// rollupRange brings series id's cells that overlap [lo, hi] up to date
// after its blocks there changed by a delete (gone: no point of the range
// is left) or a rollback: recomputed from their source above its floor,
// dropped below it (and, for a delete, when the range holds all of them).
func rollupRange(tx *bolt.Tx, id uint64, lo, hi int64, gone bool) error {
	levels, err := openLevels(tx)
	if err != nil {
		return err
	}
	for li, lv := range levels {
		from := lo
		if from > math.MinInt64+lv.iv {
			from = lo - lv.iv + 1
		}
		var cells []models.RollupCell
		c := lv.b.Cursor()
		prefix := u64Key(id)
		for k, v := c.Seek(blockKey(id, from)); k != nil && bytes.HasPrefix(k, prefix) && tsFromKey(k[8:]) <= hi; k, v = c.Next() {
			cell, err := decodeCell(k, v)
			if err != nil {
				return err
			}
			cells = append(cells, cell)
		}
		for _, cell := range cells {
			whole := gone && cell.Start >= lo && cell.Start+lv.iv-1 <= hi
			if whole || cell.Start < lv.floor {
				if err := lv.b.Delete(blockKey(id, cell.Start)); err != nil {
					return err
				}
				continue
			}
			if err := recomputeCell(levels, li, tx, id, cell.Type, cell.Start); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameLevels says whether the shard keeps exactly the levels ivs.
func sameLevels(tx *bolt.Tx, ivs []int64) bool { return slices.Equal(rollupLevels(tx), ivs) }
