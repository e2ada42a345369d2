package engine

import (
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flushDue says whether the active memtable must be frozen (and flushed)
// before entry txn goes in: it is full, or the log trim after txn would
// otherwise have to drop entries that exist nowhere else yet.
// A memtable also flushes once the engine's active memtables together exceed
// the memory budget, if it holds a fair share of it. The frozen ones are
// beside the budget (at most one per shard, each one a memtable that was
// within it): counting them would freeze ever smaller memtables while
// flushes queue for a slot, and each flush costs per series it writes. The
// caller holds wmu.
func (s *boltShard) flushDue(txn uint64) bool {
	mt := s.mems.Load().active
	if mt.points >= s.flushPoints || s.flushedTxn.Load()+s.retain < txn {
		return true
	}
	if s.memLimit <= 0 || mt.empty() {
		return false
	}
	total, shards := s.memAcct.load()
	limit := s.memAcct.activeLimit(s.memLimit)
	return total > limit && s.memCharged >= limit/(2*max(shards, 1))
}

// activeLimit is what the active memtables may hold together: the budget,
// plus as much as the series indexes hold. A memtable pays a fixed cost per
// series it holds (memSeriesBytes, less than the index pays per series)
// besides its points; with a budget alone, a node holding a million series
// froze its memtables when they held a point or two per series, and every
// flush then cost a block put per series for as many points (issue 21).
// With room for each indexed series once, the budget goes to points, and a
// flush writes several points per series however many series there are.
// The soft memory limit counts this room (app.derivedLimit).
func (b *memBudget) activeLimit(budget int64) int64 { return budget + b.index.Load() }

// accountMem brings the engine's account of this shard's active memtable up
// to date; the caller holds wmu.
func (s *boltShard) accountMem() {
	b := s.mems.Load().active.sizeBytes()
	s.memAcct.charge(b-s.memCharged, 0)
	s.memCharged = b
}

// memBudget is the engine-wide account of memtable bytes and open shards.
type memBudget struct {
	bytes  atomic.Int64 // of the active memtables
	frozen atomic.Int64 // of the frozen memtables being flushed
	index  atomic.Int64 // of the shards' series indexes
	shards atomic.Int64
	slots  flushSlots
}

func (b *memBudget) charge(bytes, shards int64) {
	b.bytes.Add(bytes)
	b.shards.Add(shards)
}

func (b *memBudget) load() (int64, int64) { return b.bytes.Load(), b.shards.Load() }

// A flush runs beside the commits: at the memtable's limit the commit freezes
// it (swaps in a fresh one, in memory only) and the shard's flusher writes
// the frozen memtable as blocks while new commits go to the active one.
// Readers load both memtables as one value before their read transaction
// begins, and merge frozen over blocks and active over frozen, so a flush
// under way or just ended shows no gap and no point twice (a point in both
// the frozen memtable and the blocks it became has the same value). The log
// keeps every entry after flushed_txn, which moves only in the flush's
// commit, so a crash at any point replays the frozen and the active
// memtable's entries alike. A shard holds at most one frozen memtable: a
// commit that would freeze a second one first waits for the flush of the
// first (backpressure), so memory stays bounded when flushes fall behind.

// freeze makes the active memtable the frozen one and starts a fresh active
// one on top of it. The caller holds wmu and fmu, and no memtable is frozen.
func (s *boltShard) freeze() {
	m := s.mems.Load()
	mt := newMemtable(s.ix)
	mt.under.Store(m.active)
	s.mems.Store(&memtables{active: mt, frozen: m.active})
	s.memAcct.charge(-s.memCharged, 0)
	s.chargeFrozen(s.memCharged)
	s.memCharged = 0
	s.accountMem()
}

// rotate freezes the active memtable for the shard's flusher. A memtable
// frozen before is flushed first: the commit waits for the flush under way,
// or does it itself if none is (it failed before, or the flusher has not
// started it yet). The caller holds wmu.
func (s *boltShard) rotate() error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if froze, err := s.refreezeLocked(); err != nil || !froze {
		return err
	}
	select {
	case s.kick <- struct{}{}:
	default: // the flusher has a kick pending already
	}
	return nil
}

// refreezeLocked flushes the memtable frozen before, if any, then freezes the
// active one unless it is empty (false). The caller holds fmu.
func (s *boltShard) refreezeLocked() (bool, error) {
	if err := s.flushFrozenLocked(); err != nil {
		return false, err
	}
	if s.mems.Load().active.empty() {
		return false, nil
	}
	s.freeze()
	return true, nil
}

// flushLocked flushes everything now: the frozen memtable, then the active
// one. The caller holds wmu.
func (s *boltShard) flushLocked() error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if froze, err := s.refreezeLocked(); err != nil || !froze {
		return err
	}
	return s.flushFrozenLocked()
}

// FlushWaiter is implemented by the shards of NewBoltEngine (type-assert a
// Shard): WaitFlush returns once the background flush of the memtable the
// last commits froze, if any, has ended (doing it if it has not started),
// with its error. For tests that count what is in blocks.
type FlushWaiter interface {
	WaitFlush() error
}

func (s *boltShard) WaitFlush() error { return s.flushFrozen() }

// flushFrozen flushes the frozen memtable, if any, waiting for a flush
// under way first.
func (s *boltShard) flushFrozen() error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flushFrozenLocked()
}

// flushFrozenLocked moves the frozen memtable into blocks in one commit, with
// the undo records of the entries it held and the new flushed_txn, so a
// crash leaves either all of it or none (and then the log replays it), then
// drops it. A failure leaves it frozen, for the next try. The caller holds
// fmu.
func (s *boltShard) flushFrozenLocked() error {
	m := s.mems.Load()
	mt := m.frozen
	if mt == nil {
		return nil
	}
	defer s.flushSlot()()
	if err := s.wal.faults.flushFault(s.path); err != nil {
		return fmt.Errorf("engine: flush up to txn %d: %w", mt.entries[len(mt.entries)-1].txn, err)
	}
	if s.flushHook != nil {
		if err := s.flushHook(false); err != nil {
			return fmt.Errorf("engine: flush up to txn %d: %w", mt.entries[len(mt.entries)-1].txn, err)
		}
	}
	upto := mt.entries[len(mt.entries)-1].txn
	var created []indexedSeries
	var gone goneChange
	var unsealed []uint64
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
		cands, err := deleteCandidates(tx, mt.dels)
		if err != nil {
			return err
		}
		if unsealed, err = unsealFor(tx, mt.dels, cands); err != nil {
			return err
		}
		deleted, err := applyDeletes(tx, mt.dels, cands, &gone)
		if err != nil {
			return err
		}
		if err := revive(tx, s.ix, mt, &gone); err != nil {
			return err
		}
		prev, c, merged, err := writeMemtable(tx, s.ix, mt, mt.entries[0].txn, s.packs.Load())
		if err != nil {
			return err
		}
		created = c
		if err := rollupFlush(tx, s.ix, mt, c); err != nil {
			return err
		}
		// Only a flush that merged nothing into older blocks can be redone
		// from the log alone if one of its blocks turns out torn.
		from := mt.entries[0].txn
		if merged || deleted {
			from = 0
		}
		if deleted {
			if err := raiseUndoFloor(tx, upto); err != nil {
				return err
			}
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
	if s.flushHook != nil {
		_ = s.flushHook(true)
	}
	s.touched(mt.oldestChange())
	// The flush is done either way: a file whose removal failed is no
	// longer recorded, and the next open removes it.
	_ = s.retireParts(unsealed)
	// Readers that loaded the memtables before this point may see the
	// frozen points twice (memtable and blocks, same values); those that
	// load them after start their read transaction after this commit.
	// Either way nothing is missing.
	s.ix.add(created)
	s.ix.applyGone(gone)
	s.chargeIndex(false)
	s.flushedTxn.Store(upto)
	s.trimTo(base, upto)
	s.flushed.Store(true)
	select {
	case s.flushSig <- struct{}{}:
	default: // a wake-up is pending already
	}
	m.active.under.Store(nil) // the index knows the frozen series now
	s.mems.Store(&memtables{active: m.active})
	s.chargeFrozen(0)
	s.collectLog()
	return nil
}

// dropMems replaces both memtables by mt (rebuilt from the log, so it holds
// what a frozen one held too). The caller holds wmu and fmu.
func (s *boltShard) dropMems(mt *memtable) {
	s.chargeFrozen(0)
	s.mems.Store(&memtables{active: mt})
	s.accountMem()
	s.wakeFlusher()
}

// wakeFlusher tells an idle flushLoop that the memtable may hold points
// again (its age check sleeps while it is empty).
func (s *boltShard) wakeFlusher() {
	select {
	case s.filled <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// chargeFrozen sets what the shard's frozen memtable is charged; the caller
// holds fmu.
func (s *boltShard) chargeFrozen(b int64) {
	s.memAcct.frozen.Add(b - s.frozenCharged)
	s.frozenCharged = b
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

// flushLoop is the shard's flusher: it flushes the memtables commits
// freeze, and freezes and flushes one that has been sitting for the flush
// interval (when above 0), so an idle shard neither holds its points in
// memory nor leaves a long log tail to replay at the next open. The age
// check ticks only while the memtable holds something: a tick that finds
// it empty stops the ticker until a commit fills it again (an idle node's
// replicas do not each wake every few seconds to find nothing). Close
// stops it.
func (s *boltShard) flushLoop(interval time.Duration, report func(db string, shard int, err error)) {
	defer close(s.loopDone)
	failing := false // the last flush failed
	var t *time.Ticker
	var tick <-chan time.Time
	startTicks := func() {
		if interval > 0 && t == nil {
			t = time.NewTicker(max(interval/4, time.Millisecond))
			tick = t.C
			s.ageTicking.Store(true)
		}
	}
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	startTicks()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-s.filled:
			startTicks()
			continue
		case now := <-tick:
			s.wmu.Lock()
			mt := s.mems.Load().active
			empty := mt.empty()
			if !s.closed() && !empty && now.Sub(mt.since) >= interval {
				s.fmu.Lock()
				if s.mems.Load().frozen == nil {
					s.freeze()
				}
				s.fmu.Unlock()
			}
			s.wmu.Unlock()
			if empty && s.mems.Load().frozen == nil {
				t.Stop() // a commit's filled wakes it
				t, tick = nil, nil
				s.ageTicking.Store(false)
			}
		}
		// A failed flush leaves the memtable frozen and its entries in the
		// log; the next commit that needs room retries it and reports the
		// error to its writer. The report tells the operator.
		err := s.flushFrozen()
		if report != nil && (err != nil || failing) {
			report(s.id.db, s.id.shard, err)
		}
		failing = err != nil
	}
}
