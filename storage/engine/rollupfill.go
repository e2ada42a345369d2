package engine

import (
	"bytes"
	"fmt"
	"time"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// A level added to a shard that holds points (a PATCH of the database's
// rollups) is filled from the raw points the shard still holds, a step at a
// time (FillRollups), so it answers for them as for the points flushed
// after; the flushes meanwhile merge their points into the cells as usual,
// and a step computes a series' cells from its blocks in one transaction,
// so the two agree. keyRollupFill (meta) is the next series id to fill,
// there while a fill is pending: it survives restarts and snapshots.
var keyRollupFill = []byte("rollup_fill")

// fillBudget bounds the raw points one fill step reads (past a series'
// end): one step is one write transaction.
var fillBudget = 1 << 20

// fillChunk is the span of raw points read at a time: a day, or a multiple
// of the coarsest interval, so every level's cells fall within one chunk.
func fillChunk(levels []rollupLevel) int64 {
	iv := levels[len(levels)-1].iv
	day := int64(24 * time.Hour)
	if iv < day && day%iv == 0 {
		return day
	}
	return iv
}

// startFill records that the cells of every series must be computed again
// from the raw points; the caller's transaction added a level.
func startFill(tx *bolt.Tx) error {
	v := tx.Bucket(bucketMeta).Get(keyNextSID)
	if len(v) != 8 || beUint64(v) <= 1 {
		return nil // no series yet
	}
	return tx.Bucket(bucketMeta).Put(keyRollupFill, u64Key(1))
}

func (s *boltShard) FillRollups() (bool, error) {
	pending := false
	if err := s.view(func(tx *bolt.Tx) error { pending = tx.Bucket(bucketMeta).Get(keyRollupFill) != nil; return nil }); err != nil || !pending {
		return false, err
	}
	more := false
	err := s.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keyRollupFill)
		if len(v) != 8 {
			return nil
		}
		levels, err := openLevels(tx)
		if err != nil {
			return err
		}
		id, next := beUint64(v), uint64(1)
		if n := meta.Get(keyNextSID); len(n) == 8 {
			next = beUint64(n)
		}
		for read := 0; id < next && read < fillBudget && len(levels) > 0; id++ {
			n, err := fillSeries(tx, levels, id)
			if err != nil {
				return fmt.Errorf("series %d: %w", id, err)
			}
			read += n
		}
		if id >= next || len(levels) == 0 {
			return meta.Delete(keyRollupFill)
		}
		more = true
		return meta.Put(keyRollupFill, u64Key(id))
	})
	if err != nil {
		return false, fmt.Errorf("engine: fill rollups: %w", err)
	}
	return more, nil
}

// fillSeries computes series id's cells of every level from its blocks,
// chunk by chunk, above each level's floor, and returns how many points it
// read.
func fillSeries(tx *bolt.Tx, levels []rollupLevel, id uint64) (int, error) {
	first, last, ok, err := flushedSpan(tx, id)
	if err != nil || !ok {
		return 0, err // !ok: no flushed point
	}
	ps, done, err := readSource(tx, first, last)
	if err != nil {
		return 0, err
	}
	defer done()
	blocks := tx.Bucket(bucketBlocks)
	chunk, read := fillChunk(levels), 0
	for at := cellStart(first, chunk); at <= last; at += chunk {
		pts, err := readSeries(blocks, ps, &strResolver{}, id, at, at+chunk-1, 0)
		if err != nil {
			return read, err
		}
		read += len(pts)
		if len(pts) == 0 {
			continue
		}
		if !pts[0].Type.Numeric() {
			return read, nil // not rolled up
		}
		for li, lv := range levels {
			var cells []models.RollupCell
			add := func(start int64) *models.RollupCell {
				if len(cells) == 0 || cells[len(cells)-1].Start != start {
					cells = append(cells, models.RollupCell{Start: start, Type: pts[0].Type})
				}
				return &cells[len(cells)-1]
			}
			if li == 0 {
				for _, p := range pts {
					add(cellStart(p.TS, lv.iv)).Add(p.TS, p.Value)
				}
			} else {
				src := levels[li-1].b.Cursor()
				for k, v := src.Seek(blockKey(id, at)); k != nil && bytes.HasPrefix(k, u64Key(id)) && tsFromKey(k[8:]) < at+chunk; k, v = src.Next() {
					c, err := decodeCell(k, v)
					if err != nil {
						return read, err
					}
					add(cellStart(c.Start, lv.iv)).Merge(c)
				}
			}
			for _, c := range cells {
				if c.Start < lv.floor {
					continue // the source no longer holds all of it: the cell stays as it is
				}
				if err := putCell(lv.b, id, c); err != nil {
					return read, err
				}
			}
		}
	}
	return read, nil
}
