package engine

import (
	"bytes"
	"math"

	bolt "go.etcd.io/bbolt"
)

// A series whose every point a delete removed is gone: it keeps its id and
// postings (a read of it finds no block), but SeriesKeys, behind InfluxQL's
// SHOW statements, no longer lists it, as InfluxDB drops a series from its
// index once DROP SERIES, DROP MEASUREMENT or DELETE leave it no point.
// The flush that empties its blocks records it in the gone bucket (id ->
// nothing); a later flush that writes points of it again takes it out.
// Until the flush, SeriesKeys hides the flushed series a pending delete of
// all time (DROP SERIES, DROP MEASUREMENT) names.
var bucketGone = []byte("gone")

// goneChange is what a flush changed in the gone set, applied to the index
// after its commit.
type goneChange struct{ add, remove []uint64 }

// markGone records series id gone if the deletes left it no block (sv:
// the sealed partitions the flush's transaction records).
func markGone(tx *bolt.Tx, sv sealedView, id uint64, ch *goneChange) error {
	prefix := u64Key(id)
	if k, _ := tx.Bucket(bucketBlocks).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
		return nil
	}
	if _, packed, err := lastPackedMax(tx, id); err != nil || packed {
		return err
	}
	if sealed, err := sv.holds(id); err != nil || sealed {
		return err
	}
	ch.add = append(ch.add, id)
	return tx.Bucket(bucketGone).Put(prefix, nil)
}

// revive takes the gone series the memtable writes points of out of the
// gone set (those its own deletes emptied, in ch.add, too).
func revive(tx *bolt.Tx, ix *seriesIndex, mt *memtable, ch *goneChange) error {
	gone := ix.goneSet()
	if len(gone) == 0 && len(ch.add) == 0 {
		return nil
	}
	if gone == nil {
		gone = make(map[uint64]struct{}, len(ch.add))
	}
	for _, id := range ch.add {
		gone[id] = struct{}{}
	}
	for i := range mt.series {
		ms := &mt.series[i]
		if len(ms.pts) == 0 {
			continue
		}
		id, ok := ix.id(ms.key)
		if _, was := gone[id]; !ok || !was {
			continue
		}
		ch.remove = append(ch.remove, id)
		if err := tx.Bucket(bucketGone).Delete(u64Key(id)); err != nil {
			return err
		}
	}
	return nil
}

func loadGone(tx *bolt.Tx, ix *seriesIndex) error {
	b := tx.Bucket(bucketGone)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, _ []byte) error {
		if len(k) == 8 {
			if ix.gone == nil {
				ix.gone = make(map[uint64]struct{})
			}
			ix.gone[beUint64(k)] = struct{}{}
		}
		return nil
	})
}

// goneSet is a copy of the gone series' ids (nil when none).
func (ix *seriesIndex) goneSet() map[uint64]struct{} {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if len(ix.gone) == 0 {
		return nil
	}
	out := make(map[uint64]struct{}, len(ix.gone))
	for id := range ix.gone {
		out[id] = struct{}{}
	}
	return out
}

func (ix *seriesIndex) applyGone(ch goneChange) {
	if len(ch.add) == 0 && len(ch.remove) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.gone == nil {
		ix.gone = make(map[uint64]struct{})
	}
	for _, id := range ch.add {
		ix.gone[id] = struct{}{}
	}
	for _, id := range ch.remove {
		delete(ix.gone, id)
	}
}

// dropsAll keeps the deletes of all time (DROP SERIES, DROP MEASUREMENT).
func dropsAll(t tombs) tombs {
	var out tombs
	for _, d := range t {
		if d.Min == math.MinInt64 && d.Max == math.MaxInt64 {
			out = append(out, d)
		}
	}
	return out
}

// covers says whether one of t names the series of key.
func (t tombs) covers(key string) bool {
	for _, d := range t {
		if ok, err := keyMatches(key, d); err == nil && ok {
			return true
		}
	}
	return false
}
