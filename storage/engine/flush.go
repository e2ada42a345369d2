package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flushDue says whether the memtable must be flushed before entry txn goes in:
// it is full, or the log trim after txn would otherwise have to drop entries
// that exist nowhere else yet.
func (s *boltShard) flushDue(txn uint64) bool {
	return s.mem.points >= s.flushPoints || s.flushedTxn+s.retain < txn
}

// flushLocked moves the memtable into the series buckets in one commit, with
// the undo records of the entries it held and the new flushed_txn, so a crash
// leaves either all of it or none (and then the log replays it). The caller
// holds wmu.
func (s *boltShard) flushLocked() error {
	mt := s.mem
	if mt.empty() {
		return nil
	}
	upto := mt.entries[len(mt.entries)-1].txn
	err := s.update(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		if m.flushedTxn != mt.entries[0].txn-1 {
			return fmt.Errorf("%w: memtable starts at txn %d, flushed up to %d", ErrCorrupt, mt.entries[0].txn, m.flushedTxn)
		}
		prev, err := writeMemtable(tx.Bucket(bucketSeries), mt)
		if err != nil {
			return err
		}
		undoB := tx.Bucket(bucketUndo)
		for _, me := range mt.entries {
			if err := undoB.Put(u64Key(me.txn), encodeUndo(me.undo, prev)); err != nil {
				return err
			}
		}
		m.flushedTxn = upto
		if err := trimLog(tx, &m, s.retain); err != nil {
			return err
		}
		return writeMeta(tx, m)
	})
	if err != nil {
		return fmt.Errorf("engine: flush up to txn %d: %w", upto, err)
	}
	// Readers that picked up the old memtable see its points twice (memtable
	// and buckets, same values); those that pick up the new one start their
	// read transaction after this commit. Either way nothing is missing.
	s.mu.Lock()
	s.mem = newMemtable()
	s.mu.Unlock()
	s.flushedTxn = upto
	return nil
}

// writeMemtable writes every memtable point into its series bucket, series by
// series in key order and each in ts order so pages fill sequentially. It
// returns the flushed values it overwrote, keyed by (series, ts), for the undo
// records.
func writeMemtable(series *bolt.Bucket, mt *memtable) (map[memSlot]uint64, error) {
	order := make([]int32, len(mt.series))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(mt.series[a].key, mt.series[b].key) })
	// bbolt keeps references to keys and values until commit: one buffer for all.
	kv := make([]byte, 16*mt.points)
	prev := make(map[memSlot]uint64)
	for _, idx := range order {
		ms := mt.series[idx]
		b, err := series.CreateBucketIfNotExists([]byte(ms.key))
		if err != nil {
			return nil, err
		}
		b.FillPercent = seriesFill
		c := b.Cursor()
		newest, _ := c.Last()
		newest = slices.Clone(newest)
		for _, p := range ms.pts {
			if len(kv) < 16 {
				return nil, fmt.Errorf("%w: memtable point count is off", ErrCorrupt)
			}
			tk, v := kv[0:8:8], kv[8:16:16]
			kv = kv[16:]
			putTSKey(tk, p.ts)
			binary.BigEndian.PutUint64(v, p.bits)
			// Points past the series' newest flushed one cannot overwrite
			// anything, which spares the lookup for the usual in-order writes.
			if newest != nil && bytes.Compare(tk, newest) <= 0 {
				if k, old := c.Seek(tk); bytes.Equal(k, tk) && len(old) == 8 {
					prev[memSlot{idx, p.ts}] = beUint64(old)
				}
			}
			if err := b.Put(tk, v); err != nil {
				return nil, err
			}
		}
	}
	return prev, nil
}

// encodeUndo turns an entry's memtable undo information into its undo record,
// resolving the values it replaced on disk from prev.
func encodeUndo(undo []memUndo, prev map[memSlot]uint64) []byte {
	b := make([]byte, 0, 3*len(undo))
	for _, u := range undo {
		op := undoOp{point: int(u.point)}
		if !u.fromDisk {
			op.hadPrev, op.prev = true, u.prev
		} else if len(prev) > 0 {
			op.prev, op.hadPrev = prev[memSlot{u.series, u.ts}]
		}
		b = appendUndo(b, op)
	}
	return b
}

// replay rebuilds a memtable from the log entries (from, to].
func replay(tx *bolt.Tx, from, to uint64, now time.Time) (*memtable, error) {
	mt := newMemtable()
	c := tx.Bucket(bucketLog).Cursor()
	next := from + 1
	for k, v := c.Seek(u64Key(next)); k != nil && beUint64(k) <= to; k, v = c.Next() {
		if beUint64(k) != next {
			break
		}
		var e Entry
		if err := e.UnmarshalBinary(v); err != nil {
			return nil, fmt.Errorf("log txn %d: %w", next, err)
		}
		mt.insert(e, now)
		next++
	}
	if next != to+1 {
		return nil, fmt.Errorf("%w: log misses unflushed txn %d (flushed up to %d, last %d)", ErrCorrupt, next, from, to)
	}
	return mt, nil
}

// flushLoop flushes a memtable that has been sitting for the flush interval,
// so an idle shard neither holds its points in memory nor leaves a long log
// tail to replay at the next open. Close stops it.
func (s *boltShard) flushLoop(interval time.Duration) {
	defer close(s.loopDone)
	t := time.NewTicker(max(interval/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.wmu.Lock()
			if !s.closed() && !s.mem.empty() && now.Sub(s.mem.since) >= interval {
				// A failed flush leaves everything in the memtable and the log;
				// the next Apply retries it and reports the error.
				_ = s.flushLocked()
			}
			s.wmu.Unlock()
		}
	}
}
