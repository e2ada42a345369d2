package engine

import (
	"fmt"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
	bolt "go.etcd.io/bbolt"
)

// unsealFor moves the sealed partitions that a delete of dels may touch
// back into the shard file, in the flush's transaction, before the deletes
// apply to its blocks: a sealed file is never rewritten, and the delete,
// its rollup cells and the gone set then work on the shard file alone. The
// shard file's points win over the partition's on the same ts. It returns
// the partitions' file ids, to retire once the transaction commits; a later
// seal moves what the delete left back out. Deletes are rare; a delete of
// all time (DROP SERIES, DROP MEASUREMENT) brings back every partition that
// holds a series it matches. cands[i] are the series dels[i] matches
// (deleteCandidates).
func unsealFor(tx *bolt.Tx, dels []*wire.Delete, cands [][]uint64) ([]uint64, error) {
	if len(dels) == 0 {
		return nil, nil
	}
	recs, err := readParts(tx)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	var ids []uint64
	rw := newBlockPut(tx, 0)
	for _, r := range recs {
		touched, err := touches(tx, r, dels, cands)
		if err != nil {
			return nil, err
		}
		if !touched {
			continue
		}
		if err := unsealOne(tx, rw, r); err != nil {
			return nil, fmt.Errorf("unseal partition [%d, %d): %w", r.start, r.end, err)
		}
		ids = append(ids, r.fileID)
	}
	return ids, nil
}

// unsealOne merges the points of the sealed partition of r under the shard
// file's and removes its record.
func unsealOne(tx *bolt.Tx, rw *blockPut, r partRec) error {
	sv, err := openSealed(tx, r.start, r.end-1)
	if err != nil {
		return err
	}
	defer sv.close()
	var (
		cur     uint64
		typ     models.FieldType
		pts     []memPoint
		scratch []memPoint
	)
	flush := func() error {
		if len(pts) == 0 {
			return nil
		}
		sealedPts := pts
		err := rewriteRange(tx, rw, nil, cur, typ, pts[0].ts, pts[len(pts)-1].ts, func(old []memPoint) []memPoint {
			return mergeMem(sealedPts, old, func(int64, uint64) {})
		})
		pts = nil
		return err
	}
	for _, p := range sv.parts {
		c := p.blocks.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 16 {
				return fmt.Errorf("%w: sealed block key %x", ErrCorrupt, k)
			}
			if id := beUint64(k); id != cur {
				if err := flush(); err != nil {
					return err
				}
				cur = id
			}
			if scratch, typ, err = decodeBlock(scratch[:0], v); err != nil {
				return fmt.Errorf("block %x: %w", k, err)
			}
			pts = append(pts, scratch...)
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return tx.Bucket(bucketParts).Delete(tsKey(r.start))
}

// touchCheckMax bounds the series a delete's check of a partition looks
// for: past it, a partition its range overlaps counts as touched.
const touchCheckMax = 4096

// touches says whether one of dels may delete points of the partition of
// r: its range overlaps the partition's points, and the partition holds a
// block of a series it matches (cands[i]: the series dels[i] matches; DROP
// MEASUREMENT m brings back only the partitions that hold m).
func touches(tx *bolt.Tx, r partRec, dels []*wire.Delete, cands [][]uint64) (bool, error) {
	var sv sealedView
	defer func() { sv.close() }()
	for i, d := range dels {
		if d.Min > r.maxTS || d.Max < r.minTS {
			continue
		}
		if len(cands[i]) > touchCheckMax {
			return true, nil
		}
		if sv.parts == nil {
			var err error
			if sv, err = openSealed(tx, r.start, r.end-1); err != nil {
				return false, err
			}
		}
		for _, id := range cands[i] {
			if held, err := sv.holds(id); err != nil || held {
				return true, err
			}
		}
	}
	return false, nil
}
