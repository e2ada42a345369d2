package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket layout of a shard file:
//
//	meta                last_txn, last_term, base_txn, base_term, flushed_txn (big-endian u64),
//	                    wal_inc (see shardlog.go)
//	log                 empty: the log is in the engine's write-ahead log (wal.go);
//	                    files of the previous format held txn -> encoded Entry here
//	undo   txn       -> what each point of that flushed entry replaced, for TruncateAfter
//	sidx, skey, post, blocks, recent: the flushed points as compressed
//	       blocks and their index (blocks.go)
//	series seriesKey -> bucket: ts key -> float64 bits; written by older
//	       versions only, converted to blocks at open
//
// base_txn/base_term describe the newest trimmed entry whose undo record is
// gone. Apply only appends to the write-ahead log, and never touches this
// file; the points of the unflushed entries live in the memtable and are
// moved into the series buckets by a flush, in bulk, which is what makes
// writes cheap. Files written before flushed_txn existed have every entry
// flushed.
var (
	bucketMeta   = []byte("meta")
	bucketLog    = []byte("log")
	bucketUndo   = []byte("undo")
	bucketSeries = []byte("series")

	keyLastTxn  = []byte("last_txn")
	keyLastTerm = []byte("last_term")
	keyBaseTxn  = []byte("base_txn")
	keyBaseTerm = []byte("base_term")
	keyFlushed  = []byte("flushed_txn")
)

type boltShard struct {
	path        string
	id          shardID
	retain      uint64
	flushPoints int
	packs       atomic.Bool  // flushes may write packs (AllowPacks)
	partLen     atomic.Int64 // the length of sealed partitions, ns; 0: seal none (SetPartitionLength)
	sealWatch   atomic.Int64 // the oldest ts changed since a seal began (seal.go: touched)

	// wmu serializes writers (commits, TruncateAfter, Restore, Snapshot) so
	// the txn checks and the cached txn/term below move together. fmu is held
	// by a flush of the frozen memtable (flush.go), and by what must not run
	// beside one; lock order wmu, fmu, mu. mu guards db: readers and writers
	// hold it shared, and it is held exclusively to swap or drop it (and the
	// memtables, by TruncateAfter and Restore), so a reader's memtables and
	// read transaction always make a consistent pair.
	wmu        sync.Mutex
	fmu        sync.Mutex
	mu         sync.RWMutex
	db         *bolt.DB
	mems       atomic.Pointer[memtables] // replaced with fmu held; the active one is filled with wmu held
	ix         *seriesIndex              // replaced only with mu held exclusively
	flushedTxn atomic.Uint64             // changed with fmu held
	kick       chan struct{}             // wakes the flusher: a memtable was frozen

	// The log: the shard's records in the engine's write-ahead log. idx is
	// changed with lmu held, and wmu or fmu; read with lmu, or wmu and fmu.
	wal        *wal
	inc        uint64         // incarnation; guarded by wmu
	released   *atomic.Uint64 // the persisted log start: records up to it may go
	lmu        sync.RWMutex
	idx        logIndex
	collectLog func() // removes the segments no shard needs any more

	retainBytes int64
	memLimit    int64        // engine-wide memtable budget; 0: none
	ixCharged   atomic.Int64 // what the engine's account holds for ix (chargeIndex)
	memAcct     *memBudget   // the engine's account of memtable bytes
	memCharged  int64        // what this shard's active memtable is charged there; guarded by wmu
	cmu         sync.Mutex   // held by a compaction step
	sealPace    *rateLimiter // paces seals (the engine's compaction limiter); nil: compaction off, no pace
	compactAt   []byte       // where compaction resumes; guarded by cmu

	frozenCharged int64 // what its frozen memtable is charged there; guarded by fmu

	q         commitQueue   // entries appended, waiting for the group commit
	trimFloor atomic.Uint64 // see SetTrimFloor

	flushed    atomic.Bool               // a flush wrote blocks since the last compaction pass
	flushSig   chan struct{}             // a flush wrote blocks: wakes compactLoop (capacity 1)
	filled     chan struct{}             // a commit put points in the memtable: wakes an idle flushLoop (capacity 1)
	ageTicking atomic.Bool               // flushLoop's age check is ticking (not asleep on an empty memtable)
	last       atomic.Pointer[lastEntry] // the last applied entry, published after its commit

	stop        chan struct{} // closed by Close to end flushLoop and compactLoop
	loopDone    chan struct{}
	compactDone chan struct{}
	stopOnce    sync.Once

	onClose func()
	// flushHook, set by tests before the shard's first write, runs in each
	// flush of a frozen memtable with fmu held, before the blocks' commit
	// (committed false; an error fails the flush) and after it (true).
	flushHook func(committed bool) error
	// sealHook, set by tests, runs in each seal between the partition
	// file's write and the shard file's commit, without the flush lock.
	sealHook func()
	// sealStep, set by tests, runs after each paced step of a seal's copy
	// with the work it booked.
	sealStep func(work int64)
}

type shardMeta struct {
	lastTxn, lastTerm, baseTxn, baseTerm, flushedTxn uint64
}

// initialMmapBytes is the address space a shard file is first mapped with.
const initialMmapBytes = 256 << 20

func boltOptions() *bolt.Options {
	return &bolt.Options{
		Timeout: 5 * time.Second, // another process holding the file is an error, not a hang
		// Rebuilding the freelist at open is cheaper overall than writing it on
		// every commit, and the map freelist is fast for large files.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Address space only (a read-only shared mapping; pages count once
		// read): without it bbolt remaps at every doubling of the file, and a
		// remap inside a flush copies every node the flush touched off the
		// old mapping, which at 40k series was most of the write path's
		// allocations.
		InitialMmapSize: initialMmapBytes,
	}
}

func openShard(path string, id shardID, o options, lim *rateLimiter, mem *memBudget, w *wal, collect func()) (*boltShard, error) {
	db, err := openBolt(path)
	if err != nil {
		return nil, err
	}
	s := &boltShard{path: path, id: id, retain: o.retain, retainBytes: o.retainBytes, flushPoints: o.flushPoints, db: db,
		memLimit: o.memBytes, memAcct: mem, wal: w, collectLog: collect,
		stop: make(chan struct{}), loopDone: make(chan struct{}), compactDone: make(chan struct{}), kick: make(chan struct{}, 1),
		flushSig: make(chan struct{}, 1), filled: make(chan struct{}, 1)}
	s.q.idle = sync.NewCond(&s.q.mu)
	s.packs.Store(o.packs)
	err = s.recover(nil)
	if err == nil {
		err = s.loadParts()
	}
	if err != nil {
		_ = closeParts(path)
		s.memAcct.charge(-s.memCharged, 0)
		if s.inc != 0 {
			w.unregister(s.inc)
		}
		forgetPacks(db)
		_ = db.Close()
		return nil, err
	}
	s.q.lastTxn, s.q.lastTerm = s.LastEntry()
	go s.flushLoop(o.flushInterval, o.flushReport)
	if o.compactRate > 0 {
		s.sealPace = lim
		go s.compactLoop(o.compactEvery, lim)
	} else {
		close(s.compactDone)
	}
	return s, nil
}

// allocSize is how far a large shard file grows past its data at a time
// (bbolt's default, 16 MiB, is more than a compressed shard may hold).
const allocSize = 2 << 20

func openBolt(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	db.AllocSize = allocSize
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := checkFormat(tx, path); err != nil {
			return err
		}
		return loadPacks(tx)
	})
	if err != nil {
		forgetPacks(db)
		_ = db.Close()
		return nil, fmt.Errorf("engine: init %s: %w", path, err)
	}
	return db, nil
}

// recover loads the meta, moves the log of a file of the previous format
// into the write-ahead log, rebuilds the log index from the shard's records
// (recs, or those the write-ahead log found at open) and replays the
// unflushed tail into a fresh memtable. The caller has the shard to itself:
// it is being opened, or holds wmu, fmu and mu exclusively.
func (s *boltShard) recover(recs []walRec) error {
	if err := s.db.Update(convertLegacy); err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	var (
		m      shardMeta
		inc    uint64
		legacy []Entry
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		if m, err = readMeta(tx); err != nil {
			return err
		}
		if v := tx.Bucket(bucketMeta).Get(keyInc); len(v) == 8 {
			inc = beUint64(v)
			return nil
		}
		legacy, err = legacyLog(tx, m)
		return err
	})
	if err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	if inc == 0 {
		// A new file, or one of the previous format: its log goes into the
		// write-ahead log first, then the file forgets it. A crash between
		// the two migrates again under another incarnation.
		inc = newIncarnation()
		s.adopt(inc)
		if len(legacy) > 0 {
			data, rr := encodeEntries(s.id, inc, m.baseTerm, legacy)
			if recs, err = s.wal.append(data, rr); err != nil {
				return fmt.Errorf("engine: migrate the log of %s: %w", s.path, err)
			}
		}
		flushedTerm := termOf(m.flushedTxn, m.baseTxn, m.baseTerm, legacy)
		if err := s.db.Update(func(tx *bolt.Tx) error { return clearLegacyLog(tx, m, inc, flushedTerm) }); err != nil {
			return fmt.Errorf("engine: migrate the log of %s: %w", s.path, err)
		}
		m.lastTxn, m.lastTerm = m.flushedTxn, flushedTerm
	} else if recs == nil {
		recs = s.wal.take(inc)
	}
	s.adopt(inc)
	l, err := buildIndex(recs, m)
	if err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	s.lmu.Lock()
	s.idx = l
	s.lmu.Unlock()
	if err := s.db.Update(func(tx *bolt.Tx) error { return repairTorn(tx, l.base) }); err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		var err error
		if m, err = readMeta(tx); err != nil {
			return err
		}
		s.ix, err = loadIndex(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	s.chargeIndex(false)
	last, lastTerm := l.last()
	mt, err := s.replayLog(m.flushedTxn, last)
	if err != nil {
		return fmt.Errorf("engine: recover %s: %w", s.path, err)
	}
	s.flushedTxn.Store(m.flushedTxn)
	s.dropMems(mt)
	s.released.Store(m.baseTxn)
	s.publish(last, lastTerm)
	return nil
}

// adopt makes inc the shard's incarnation, live in the write-ahead log, and
// the previous one dead.
func (s *boltShard) adopt(inc uint64) {
	if s.inc == inc {
		return
	}
	old := s.inc
	s.released = s.wal.register(inc, s.id)
	s.inc = inc
	if old != 0 {
		s.wal.unregister(old)
	}
}

func readMeta(tx *bolt.Tx) (shardMeta, error) {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return shardMeta{}, fmt.Errorf("%w: no meta bucket", ErrBadSnapshot)
	}
	get := func(k []byte) uint64 {
		if v := b.Get(k); len(v) == 8 {
			return beUint64(v)
		}
		return 0
	}
	m := shardMeta{get(keyLastTxn), get(keyLastTerm), get(keyBaseTxn), get(keyBaseTerm), get(keyFlushed)}
	if b.Get(keyFlushed) == nil {
		m.flushedTxn = m.lastTxn // written before the memtable: all in the buckets
	}
	if m.flushedTxn > m.lastTxn || m.baseTxn > m.flushedTxn {
		return shardMeta{}, fmt.Errorf("%w: meta base %d, flushed %d, last %d", ErrCorrupt, m.baseTxn, m.flushedTxn, m.lastTxn)
	}
	return m, nil
}

func writeMeta(tx *bolt.Tx, m shardMeta) error {
	b := tx.Bucket(bucketMeta)
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{keyLastTxn, m.lastTxn}, {keyLastTerm, m.lastTerm}, {keyBaseTxn, m.baseTxn}, {keyBaseTerm, m.baseTerm}, {keyFlushed, m.flushedTxn}} {
		if err := b.Put(kv.k, u64Key(kv.v)); err != nil {
			return err
		}
	}
	return nil
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// lastEntry is the txn id and term of the last applied entry, published as
// one value so that readers never see one without the other.
type lastEntry struct{ txn, term uint64 }

func (s *boltShard) publish(txn, term uint64) { s.last.Store(&lastEntry{txn, term}) }

func (s *boltShard) LastEntry() (txn, term uint64) {
	if l := s.last.Load(); l != nil {
		return l.txn, l.term
	}
	return 0, 0
}

func (s *boltShard) LastTxnID() uint64 {
	txn, _ := s.LastEntry()
	return txn
}

func (s *boltShard) LastTerm() uint64 {
	_, term := s.LastEntry()
	return term
}

// closed is stable while the caller holds wmu, which Close also takes.
func (s *boltShard) closed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db == nil
}

// view runs fn in a read transaction unless the shard is closed.
func (s *boltShard) view(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.View(fn)
}

// update runs fn in one write transaction, committed with fsync.
func (s *boltShard) update(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.Update(fn)
}

// SetTrimFloor tells the log which entries replication no longer needs: those
// up to txn (every replica that may still fetch from this one holds them).
// Once flushed they are dropped at the next commit or flush. Entries past the
// floor are kept within the retention bounds only. 0, the value at open, keeps
// the retention bounds alone.
func (s *boltShard) SetTrimFloor(txn uint64) { s.trimFloor.Store(txn) }

// TruncateAfter rolls the flushed entries past txnID back with their undo
// records, then writes the cut to the write-ahead log (in that order: a
// crash between the two leaves the entries in the log, replayed into the
// memtable), and rebuilds the memtable from what remains unflushed. It holds
// mu exclusively throughout, so no reader sees the buckets and the memtable
// from different sides of the cut; divergent tails are rare and short, so
// the pause is too.
func (s *boltShard) TruncateAfter(txnID uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed() {
		return ErrClosed
	}
	last := s.LastTxnID()
	if txnID >= last {
		return nil
	}
	// No flush beside the cut: a frozen memtable whose flush failed is
	// replayed with the rest of the unflushed tail.
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lmu.RLock()
	base := s.idx.base
	var term uint64
	if txnID >= base {
		term = s.idx.termAt(txnID)
	}
	s.lmu.RUnlock()
	if txnID < base {
		return fmt.Errorf("engine: truncate after %d: %w: log starts after %d", txnID, ErrCompacted, base)
	}
	if s.flushedTxn.Load() > txnID {
		undone, err := s.readLog(txnID, s.flushedTxn.Load(), 0)
		if err == nil {
			err = s.db.Update(func(tx *bolt.Tx) error {
				if floor := undoFloor(tx); txnID < floor {
					return fmt.Errorf("%w: a delete flushed with the entries up to %d has no undo record", ErrCompacted, floor)
				}
				m, err := readMeta(tx)
				if err != nil {
					return err
				}
				if err := undoEntries(tx, s.ix, txnID, undone); err != nil {
					return err
				}
				m.flushedTxn = txnID
				m.lastTxn, m.lastTerm = txnID, term
				return writeMeta(tx, m)
			})
		}
		if err != nil {
			return fmt.Errorf("engine: truncate after %d: %w", txnID, err)
		}
		s.flushedTxn.Store(txnID)
		s.touched(math.MinInt64)
	}
	rec := walRec{kind: recTruncate, inc: s.inc, db: s.id.db, shard: s.id.shard, txn: txnID, term: term}
	data, _ := appendRecord(nil, rec, nil)
	_, err := s.wal.append(data, []walRec{rec})
	if err == nil {
		s.lmu.Lock()
		s.idx.cutAfter(txnID)
		s.lmu.Unlock()
		last = txnID
	}
	mt, rerr := s.replayLog(s.flushedTxn.Load(), last)
	if rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		s.dropMems(mt)
	}
	if err != nil {
		return fmt.Errorf("engine: truncate after %d: %w", txnID, err)
	}
	s.publish(txnID, term)
	s.resyncQueueLocked(fmt.Errorf("%w: log truncated after %d", ErrTxnGap, txnID))
	return nil
}

func (s *boltShard) Close() error {
	// Stop the flusher first: it takes wmu, which Close is about to hold.
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.loopDone
	<-s.compactDone
	defer s.closeQueue() // once wmu is released: the committer takes it
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.mu.Lock()
	db := s.db
	s.db = nil
	s.mu.Unlock()
	if db == nil {
		return ErrClosed
	}
	s.memAcct.charge(-s.memCharged, -1)
	s.memCharged = 0
	s.chargeFrozen(0)
	s.chargeIndex(true)
	// The log start trimmed since the last flush persists, so a reopen
	// serves the same log (after a crash it may serve a longer one).
	perr := db.Update(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil || s.idx.base <= m.baseTxn {
			return err
		}
		if err := trimUndo(tx, &m, s.idx.base, s.idx.baseTerm); err != nil {
			return err
		}
		return writeMeta(tx, m)
	})
	s.wal.handBack(s.inc, s.id, &s.idx)
	if s.onClose != nil {
		s.onClose()
	}
	forgetPacks(db)
	if err := errors.Join(perr, db.Close(), closeParts(s.path)); err != nil {
		return fmt.Errorf("engine: close %s: %w", s.path, err)
	}
	return nil
}
