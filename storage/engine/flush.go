package engine

import (
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flushDue says whether the memtable must be flushed before entry txn goes in:
// it is full, or the log trim after txn would otherwise have to drop entries
// that exist nowhere else yet.
// A memtable also flushes once the engine's memtables together exceed the
// memory budget, if it holds a fair share of it.
func (s *boltShard) flushDue(txn uint64) bool {
	if s.mem.points >= s.flushPoints || s.flushedTxn+s.retain < txn {
		return true
	}
	if s.memLimit <= 0 || s.mem.empty() {
		return false
	}
	total, shards := s.memAcct.load()
	return total > s.memLimit && s.memCharged >= s.memLimit/(2*max(shards, 1))
}

// accountMem brings the engine's account of this shard's memtable up to
// date; the caller holds wmu.
func (s *boltShard) accountMem() {
	b := s.mem.sizeBytes()
	s.memAcct.charge(b-s.memCharged, 0)
	s.memCharged = b
}

// memBudget is the engine-wide account of memtable bytes and open shards.
type memBudget struct {
	bytes  atomic.Int64
	shards atomic.Int64
	slots  flushSlots
}

func (b *memBudget) charge(bytes, shards int64) {
	b.bytes.Add(bytes)
	b.shards.Add(shards)
}

func (b *memBudget) load() (int64, int64) { return b.bytes.Load(), b.shards.Load() }

// flushLocked moves the memtable into the series buckets in one commit, with
// the undo records of the entries it held and the new flushed_txn, so a crash
// leaves either all of it or none (and then the log replays it). The caller
// holds wmu.
func (s *boltShard) flushLocked() error {
	mt := s.mem
	if mt.empty() {
		return nil
	}
	defer s.flushSlot()()
	upto := mt.entries[len(mt.entries)-1].txn
	var created map[string]uint64
	uptoTerm, base, baseTerm := s.flushTrim(upto)
	err := s.update(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		if m.flushedTxn != mt.entries[0].txn-1 {
			return fmt.Errorf("%w: memtable starts at txn %d, flushed up to %d", ErrCorrupt, mt.entries[0].txn, m.flushedTxn)
		}
		if err := resetRecent(tx); err != nil {
			return err
		}
		prev, c, merged, err := writeMemtable(tx, s.ix, mt, mt.entries[0].txn)
		if err != nil {
			return err
		}
		created = c
		// Only a flush that merged nothing into older blocks can be redone
		// from the log alone if one of its blocks turns out torn.
		from := mt.entries[0].txn
		if merged {
			from = 0
		}
		if err := tx.Bucket(bucketMeta).Put(keyRecentFrom, u64Key(from)); err != nil {
			return err
		}
		undoB := tx.Bucket(bucketUndo)
		for _, me := range mt.entries {
			if err := undoB.Put(u64Key(me.txn), encodeUndo(me, prev)); err != nil {
				return err
			}
		}
		m.flushedTxn, m.lastTxn, m.lastTerm = upto, upto, uptoTerm
		if err := trimUndo(tx, &m, base, baseTerm); err != nil {
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
	s.ix.add(created)
	s.trimTo(base)
	s.flushed.Store(true)
	s.mu.Lock()
	s.mem = newMemtable(s.ix)
	s.mu.Unlock()
	s.accountMem()
	s.flushedTxn = upto
	s.collectLog()
	return nil
}

// encodeUndo turns an entry's memtable undo information into its undo record,
// resolving the values it replaced on disk from prev. The points without
// memtable undo replaced nothing.
func encodeUndo(me memEntry, prev map[memSlot]uint64) []byte {
	b := make([]byte, 0, 3*me.points)
	undo := me.undo
	for i := range me.points {
		if len(undo) == 0 || int(undo[0].point) != i {
			b = appendUndo(b, undoOp{point: i})
			continue
		}
		u := undo[0]
		undo = undo[1:]
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
