package engine

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Rollups is implemented by the shards of NewBoltEngine (type-assert a
// Shard): the rollup levels a storage node keeps for its database.
type Rollups interface {
	// SetRollups makes the shard keep exactly the levels of these
	// intervals (finest first, each dividing the next): a level no longer
	// named is dropped with its cells; a new one gets the cells of the
	// points flushed from then on, and of those the shard holds already
	// through FillRollups. The same levels again write nothing.
	SetRollups(intervals []time.Duration) error
	// FillRollups computes, one bounded step (a write transaction) per
	// call, the cells of the points the shard held when a level was
	// added; more says steps are left.
	FillRollups() (more bool, err error)
	// ExpireRollup drops the cells of level interval that end at or before
	// cutoff (unix ns) and returns how many.
	ExpireRollup(interval time.Duration, cutoff int64) (int, error)
	// ScanRollup is Scanner.Scan over the cells of level interval whose
	// start is in [start, end], in start order per series: only cells are
	// read, never a block. Points not flushed yet are in no cell, and a
	// cell of a series with a delete not flushed yet that overlaps it is
	// left out until the flush recomputes it.
	ScanRollup(interval time.Duration, metric string, match map[string]string, start, end int64,
		keep func(key string) bool, visit func(key string, cells []models.RollupCell) error) error
}

// rollupReads counts the cells rollup scans decoded, beside blockReads.
var rollupReads atomic.Uint64

// RollupReads is how many rollup cells this process's queries have read.
func RollupReads() uint64 { return rollupReads.Load() }

func levelsOf(intervals []time.Duration) ([]int64, error) {
	out := make([]int64, len(intervals))
	for i, iv := range intervals {
		if iv <= 0 || i > 0 && (iv <= intervals[i-1] || iv%intervals[i-1] != 0) {
			return nil, fmt.Errorf("engine: rollup intervals %v: each must be positive and divide the next", intervals)
		}
		out[i] = int64(iv)
	}
	return out, nil
}

func (s *boltShard) SetRollups(intervals []time.Duration) error {
	ivs, err := levelsOf(intervals)
	if err != nil {
		return err
	}
	same := false
	if err := s.view(func(tx *bolt.Tx) error { same = sameLevels(tx, ivs); return nil }); err != nil || same {
		return err
	}
	err = s.update(func(tx *bolt.Tx) error {
		for _, old := range rollupLevels(tx) {
			if slices.Contains(ivs, old) {
				continue
			}
			if tx.Bucket(rollupBucket(old)) != nil {
				if err := tx.DeleteBucket(rollupBucket(old)); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bucketMeta).Delete(rollupFloorKey(old)); err != nil {
				return err
			}
		}
		var v []byte
		added := false
		for _, iv := range ivs {
			added = added || tx.Bucket(rollupBucket(iv)) == nil
			if _, err := tx.CreateBucketIfNotExists(rollupBucket(iv)); err != nil {
				return err
			}
			v = append(v, u64Key(uint64(iv))...)
		}
		if added {
			if err := startFill(tx); err != nil {
				return err
			}
		}
		if len(v) == 0 {
			return tx.Bucket(bucketMeta).Delete(keyRollupLevels)
		}
		return tx.Bucket(bucketMeta).Put(keyRollupLevels, v)
	})
	if err != nil {
		return fmt.Errorf("engine: set rollups: %w", err)
	}
	return nil
}

func (s *boltShard) ExpireRollup(interval time.Duration, cutoff int64) (int, error) {
	iv := int64(interval)
	total := 0
	var at []byte
	for {
		// Found in a read transaction first: a pass with nothing to drop,
		// the usual one, writes (and syncs) nothing.
		var drop [][]byte
		err := s.view(func(tx *bolt.Tx) error {
			drop, at = expiredCells(tx.Bucket(rollupBucket(iv)), iv, cutoff, at)
			return nil
		})
		if err == nil && len(drop) > 0 {
			err = s.update(func(tx *bolt.Tx) error {
				b := tx.Bucket(rollupBucket(iv))
				if b == nil {
					return nil // the level was dropped meanwhile
				}
				for _, k := range drop {
					if err := b.Delete(k); err != nil {
						return err
					}
				}
				return raiseFloor(tx, rollupFloorKey(iv), cutoff)
			})
		}
		if err != nil {
			return total, fmt.Errorf("engine: expire rollup %s: %w", interval, err)
		}
		total += len(drop)
		if at == nil {
			return total, nil
		}
	}
}

// expiredCells lists up to expireBudget cells of b, from at (nil: the
// first), that end at or before cutoff, and where the next step starts (nil
// at the end). A series' cells are in time order: past its first one that
// ends later, the walk seeks to the next series.
func expiredCells(b *bolt.Bucket, iv, cutoff int64, at []byte) (drop [][]byte, next []byte) {
	if b == nil {
		return nil, nil
	}
	c := b.Cursor()
	k, _ := c.First()
	if at != nil {
		k, _ = c.Seek(at)
	}
	for k != nil {
		if len(drop) == expireBudget {
			return drop, slices.Clone(k)
		}
		if tsFromKey(k[8:])+iv > cutoff {
			k, _ = c.Seek(u64Key(beUint64(k) + 1))
			continue
		}
		drop = append(drop, slices.Clone(k))
		k, _ = c.Next()
	}
	return drop, nil
}

func (s *boltShard) ScanRollup(interval time.Duration, metric string, match map[string]string, start, end int64,
	keep func(string) bool, visit func(string, []models.RollupCell) error) error {
	if start > end {
		return nil
	}
	err := s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		b := tx.Bucket(rollupBucket(int64(interval)))
		if b == nil {
			return nil // no such level: nothing rolled up
		}
		hide, _ := m.pending()
		refs, err := s.candidatesByKey(tx, metric, match)
		if err != nil {
			return err
		}
		var cells []models.RollupCell
		c := b.Cursor()
		for _, r := range refs {
			if !keep(r.key) {
				continue
			}
			ranges, err := hide.ranges(r.key)
			if err != nil {
				return err
			}
			cells = cells[:0]
			prefix := u64Key(r.id)
			for k, v := c.Seek(blockKey(r.id, start)); k != nil && bytes.HasPrefix(k, prefix) && tsFromKey(k[8:]) <= end; k, v = c.Next() {
				cell, err := decodeCell(k, v)
				if err != nil {
					return err
				}
				rollupReads.Add(1)
				if !overlaps(ranges, cell.Start, cell.Start+int64(interval)-1) {
					cells = append(cells, cell)
				}
			}
			if len(cells) > 0 {
				if err := visit(r.key, cells); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("engine: rollup scan %q: %w", metric, err)
	}
	return nil
}

// overlaps says whether [lo, hi] meets any of ranges.
func overlaps(ranges [][2]int64, lo, hi int64) bool {
	for _, r := range ranges {
		if r[0] <= hi && r[1] >= lo {
			return true
		}
	}
	return false
}
