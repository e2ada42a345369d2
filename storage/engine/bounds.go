package engine

import (
	"bytes"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
)

// Bounder is a shard that knows the time span of its series without
// reading their points: a streamed query lays its time windows out from it.
type Bounder interface {
	// Bounds is the span [lo, hi] of the points of metric's series that
	// hold every term of match (as Scan's candidates) and that keep
	// accepts; ok is false when there is none. It reads the memtables and
	// the flushed blocks' keys and headers, decoding no block.
	Bounds(metric string, match map[string]string, keep func(key string) bool) (lo, hi int64, ok bool, err error)
}

var _ Bounder = (*boltShard)(nil)

func (s *boltShard) Bounds(metric string, match map[string]string, keep func(string) bool) (lo, hi int64, ok bool, err error) {
	lo, hi = math.MaxInt64, math.MinInt64
	widen := func(a, b int64) {
		lo, hi, ok = min(lo, a), max(hi, b), true
	}
	err = s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		for _, mt := range m.all() {
			mt.bounds(metric, keep, widen)
		}
		ids, err := candidateIDs(tx, metric, match)
		if err != nil {
			return err
		}
		skey, blocks := tx.Bucket(bucketSKey), tx.Bucket(bucketBlocks)
		sv, err := openSealed(tx, math.MinInt64, math.MaxInt64)
		if err != nil {
			return err
		}
		defer sv.close()
		for _, id := range ids {
			key, err := s.seriesKey(skey, id)
			if err != nil {
				return err
			}
			if !keep(key) {
				continue
			}
			// Blocks may overlap (late points): every header counts.
			prefix := u64Key(id)
			c := blocks.Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				h, _, err := parseBlock(v)
				if err != nil {
					return fmt.Errorf("series %q: block %x: %w", key, k, err)
				}
				if h.count > 0 {
					widen(h.minTS, h.maxTS)
				}
			}
			if first, last, packed, err := packedSpan(tx, id); err != nil {
				return fmt.Errorf("series %q: %w", key, err)
			} else if packed {
				widen(first, last)
			}
			if err := sv.span(id, widen); err != nil {
				return fmt.Errorf("series %q: %w", key, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("engine: bounds of %q: %w", metric, err)
	}
	return lo, hi, ok, nil
}

// bounds widens the span by each of metric's series in the memtable that
// keep accepts (keep runs under the memtable's read lock).
func (mt *memtable) bounds(metric string, keep func(string) bool, widen func(lo, hi int64)) {
	mt.mu.RLock()
	defer mt.mu.RUnlock()
	for _, idx := range mt.byMetric[metric] {
		ms := &mt.series[idx]
		if len(ms.pts) > 0 && keep(ms.key) {
			widen(ms.pts[0].ts, ms.pts[len(ms.pts)-1].ts)
		}
	}
}
