package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	bolt "go.etcd.io/bbolt"
)

// Deletes (InfluxQL's DELETE, DROP SERIES, DROP MEASUREMENT) are entries of
// the replicated log like writes (Entry.Delete, wire version 3), so they
// apply in log order on every replica: the points written by the entries
// before a delete are gone, those of later entries stay.
//
// A delete applied to a memtable removes the matching points it holds at
// once and stays in the memtable's list (dels) until its flush, which
// applies it to the blocks before it writes the memtable's points (every
// block is older than every entry of the memtable). Until then readers
// hide the matching points of the blocks under the deletes of both
// memtables, and those of the frozen memtable under the active one's: a
// block point hidden that way which the frozen memtable's flush wrote
// after the delete is in that memtable too, and the reader merges it back.
// A restart replays the deletes of the unflushed log like its writes.
//
// A flushed delete has no undo record: TruncateAfter past a flush that held
// one answers ErrCompacted (keyUndoFloor), and the follower then takes a
// full sync from its leader instead of rolling its tail back.

// keyUndoFloor (meta) is the last txn of the newest flush that applied a
// delete: the flushed entries up to it cannot be rolled back one by one.
var keyUndoFloor = []byte("undo_floor")

// ErrBadDelete: an entry's delete names no measurement, an empty range, or
// holds points too.
var ErrBadDelete = wire.ErrBadDelete

// checkEntry refuses a delete entry that cannot be applied.
func checkEntry(e *Entry) error {
	if e.Delete == nil {
		return nil
	}
	if len(e.Points) > 0 {
		return fmt.Errorf("%w: a delete entry holds points", ErrBadDelete)
	}
	return e.Delete.Validate()
}

// deleteMatch is d's tags as a Query match.
func deleteMatch(d *wire.Delete) map[string]string {
	m := make(map[string]string, len(d.Tags))
	for _, t := range d.Tags {
		m[t.Key] = t.Value
	}
	return m
}

// keyMatches says whether the series of key is one d deletes from.
func keyMatches(key string, d *wire.Delete) (bool, error) {
	metric, tags, _, err := lineproto.ParseSeriesKey(key)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return metric == d.Metric && holdsTags(tags, d.Tags), nil
}

// holdsTags: every one of want is in tags (both sorted by key).
func holdsTags(tags, want []lineproto.Tag) bool {
	i := 0
	for _, w := range want {
		for i < len(tags) && tags[i].Key < w.Key {
			i++
		}
		if i == len(tags) || tags[i] != w {
			return false
		}
	}
	return true
}

// tombs are deletes not yet applied to what a reader reads under them.
type tombs []*wire.Delete

// ranges lists the time ranges tombs delete from the series of key.
func (t tombs) ranges(key string) ([][2]int64, error) {
	var out [][2]int64
	for _, d := range t {
		ok, err := keyMatches(key, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, [2]int64{d.Min, d.Max})
		}
	}
	return out, nil
}

// hideTS removes from pts (sorted by ts, edited in place) those in any of
// ranges.
func hideTS[T any](pts []T, ts func(T) int64, ranges [][2]int64) []T {
	if len(ranges) == 0 {
		return pts
	}
	return slices.DeleteFunc(pts, func(p T) bool {
		v := ts(p)
		for _, r := range ranges {
			if v >= r[0] && v <= r[1] {
				return true
			}
		}
		return false
	})
}

// hideMem and hidePoints are hideTS for the readers' two point types.
func hideMem(pts []memPoint, ranges [][2]int64) []memPoint {
	return hideTS(pts, func(p memPoint) int64 { return p.ts }, ranges)
}

func hidePoints(pts []SeriesPoint, ranges [][2]int64) []SeriesPoint {
	return hideTS(pts, func(p SeriesPoint) int64 { return p.TS }, ranges)
}

// pending is what a reader of these memtables must hide of the blocks: the
// deletes of both memtables (frozen and active), and of the frozen
// memtable's points: the active one's.
func (m *memtables) pending() (blocks, frozen tombs) {
	m.active.mu.RLock()
	frozen = slices.Clone(tombs(m.active.dels))
	m.active.mu.RUnlock()
	if m.frozen != nil {
		blocks = append(tombs(nil), m.frozen.dels...) // frozen: no writer any more
	}
	return append(blocks, frozen...), frozen
}

// applyDelete removes the points d deletes from the memtable and keeps d
// for the flush. The caller holds mu.
func (mt *memtable) applyDelete(d *wire.Delete) {
	for _, idx := range mt.byMetric[d.Metric] {
		ms := &mt.series[idx]
		if ok, err := keyMatches(ms.key, d); err != nil || !ok {
			continue // a key the memtable built always parses
		}
		lo, hi := ms.span(d.Min, d.Max)
		if lo >= hi {
			continue
		}
		ms.pts = slices.Delete(ms.pts, lo, hi)
		mt.points -= hi - lo
		if len(ms.pts) > 0 {
			ms.last = ms.pts[len(ms.pts)-1].ts
		}
	}
	mt.dels = append(mt.dels, d)
	mt.bytes += memEntryBytes + int64(len(d.Metric))
}

// deleteCandidates are the series each of dels matches, looked up once for
// the flush: unsealFor and applyDeletes both need them, and neither changes
// the postings they come from.
func deleteCandidates(tx *bolt.Tx, dels []*wire.Delete) ([][]uint64, error) {
	cands := make([][]uint64, len(dels))
	for i, d := range dels {
		var err error
		if cands[i], err = candidateIDs(tx, d.Metric, deleteMatch(d)); err != nil {
			return nil, err
		}
	}
	return cands, nil
}

// applyDeletes applies a flushing memtable's deletes to the blocks, in
// order, records the series they emptied in gone, and says whether it had
// any (cands[i]: the series dels[i] matches, deleteCandidates). The
// caller's transaction then writes the memtable's points over them.
func applyDeletes(tx *bolt.Tx, dels []*wire.Delete, cands [][]uint64, gone *goneChange) (bool, error) {
	if len(dels) == 0 {
		return false, nil
	}
	bp := newBlockPut(tx, 0) // rewritten blocks: not rebuildable from the log alone
	// The sealed partitions left after unsealFor, opened once for every
	// series the deletes empty, not once a series.
	sv, err := openSealed(tx, math.MinInt64, math.MaxInt64)
	if err != nil {
		return true, err
	}
	defer sv.close()
	for i, d := range dels {
		for _, id := range cands[i] {
			if err := deleteRange(tx, bp, id, d.Min, d.Max); err != nil {
				return true, fmt.Errorf("delete from series %d: %w", id, err)
			}
			if err := rollupRange(tx, id, d.Min, d.Max, true); err != nil {
				return true, fmt.Errorf("delete from the rollups of series %d: %w", id, err)
			}
			if err := markGone(tx, sv, id, gone); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// deleteRange removes series id's points in [lo, hi] from its blocks: the
// blocks that overlap the range are replaced by what remains of them.
func deleteRange(tx *bolt.Tx, bp *blockPut, id uint64, lo, hi int64) error {
	packed, typ, inPacks, err := takePacked(tx, id, lo, hi, nil)
	if err != nil {
		return err
	}
	var keys [][]byte
	var keep []memPoint
	var scratch []memPoint
	err = seriesBlocks(tx.Bucket(bucketBlocks), id, lo, func(k, v []byte, h blockHeader) (bool, error) {
		if h.minTS > hi {
			return false, nil
		}
		var err error
		scratch, typ, err = decodeBlock(scratch[:0], v)
		if err != nil {
			return false, fmt.Errorf("block %x: %w", k, err)
		}
		keys = append(keys, slices.Clone(k))
		keep = append(keep, hideMem(scratch, [][2]int64{{lo, hi}})...)
		return true, nil
	})
	if err != nil || len(keys) == 0 && !inPacks {
		return err
	}
	for _, k := range keys {
		if err := deleteBlock(tx, k); err != nil {
			return err
		}
	}
	if inPacks {
		keep = mergeMem(hideMem(packed, [][2]int64{{lo, hi}}), keep, func(int64, uint64) {})
	}
	if len(keep) == 0 {
		return nil
	}
	return bp.put(id, keep, typ)
}

// raiseUndoFloor records that the flushed entries up to txn cannot be
// rolled back one by one.
func raiseUndoFloor(tx *bolt.Tx, txn uint64) error {
	return tx.Bucket(bucketMeta).Put(keyUndoFloor, u64Key(max(undoFloor(tx), txn)))
}

func undoFloor(tx *bolt.Tx) uint64 {
	if v := tx.Bucket(bucketMeta).Get(keyUndoFloor); len(v) == 8 {
		return beUint64(v)
	}
	return 0
}
