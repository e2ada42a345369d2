package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-db/cairn/internal/gopool"
)

// Group commit. Append only queues an entry; one committer goroutine per
// shard (running while there is work) takes everything queued, writes it to
// the engine's write-ahead log as one request, which shares its write and
// fsync with the requests of other shards queued meanwhile, inserts the points into the
// memtable, publishes the new last txn id and only then wakes the waiters.
// Batches that arrive while a commit is under way make up the next group, so
// under concurrency the fsync cost is shared instead of paid per batch. The
// commit holds wmu (writers only): readers and other shards never wait for it.

// pendingEntry is an entry queued for the next group commit.
type pendingEntry struct {
	e    Entry
	pre  *Prepared
	done chan struct{} // closed once err is set
	err  error
}

func (p *pendingEntry) wait() error {
	<-p.done
	return p.err
}

func (p *pendingEntry) finish(err error) {
	p.err = err
	close(p.done)
}

// commitQueue holds the entries appended but not committed yet.
type commitQueue struct {
	mu       sync.Mutex
	idle     *sync.Cond // signalled when the committer exits
	pending  []*pendingEntry
	lastTxn  uint64 // of the last entry applied or queued
	lastTerm uint64
	running  bool // a committer goroutine is draining pending
	closed   bool
	commits  uint64 // log commits (one fsync each) done by the committer
}

// NextTxnID is the txn id the next Append or Apply must carry.
func (s *boltShard) NextTxnID() uint64 {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.q.lastTxn + 1
}

// Append queues e for the next group commit and returns at once. The returned
// wait blocks until e is durable and visible (nil) or failed.
func (s *boltShard) Append(e Entry) (func() error, error) {
	s.wal.arrive(1)   // see wal.gather
	pre := e.Prepared // before the lock: see prepare.go
	if pre == nil {
		pre = Prepare(e.Points)
	}
	e.Prepared = nil // the queue's pre owns it
	// A key no flush could write is refused here, before it is numbered,
	// logged or in a memtable: nothing of the entry is kept.
	err := pre.keys.check()
	if err == nil {
		err = checkEntry(&e)
	}
	q := &s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	switch want := q.lastTxn + 1; {
	case err != nil:
	case q.closed:
		err = ErrClosed
	case e.TxnID != want:
		err = fmt.Errorf("%w: got %d, want %d", ErrTxnGap, e.TxnID, want)
	case e.Term < q.lastTerm:
		err = fmt.Errorf("%w: got %d, last %d", ErrTermRegress, e.Term, q.lastTerm)
	}
	if err != nil {
		s.wal.depart(1)
		pre.release()
		return nil, err
	}
	p := &pendingEntry{e: e, pre: pre, done: make(chan struct{})}
	q.pending = append(q.pending, p)
	q.lastTxn, q.lastTerm = e.TxnID, e.Term
	if !q.running {
		q.running = true
		workers.Go(s.commitLoop)
	}
	return p.wait, nil
}

// Apply appends e and waits for its commit.
func (s *boltShard) Apply(e Entry) error {
	wait, err := s.Append(e)
	if err != nil {
		return err
	}
	return wait()
}

// commitLoop commits the queue group by group until it is empty.
func (s *boltShard) commitLoop() {
	q := &s.q
	for {
		q.mu.Lock()
		group := takeGroup(&q.pending, maxGroupPoints)
		if len(group) == 0 {
			q.running = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		s.wmu.Lock()
		err := s.commitLocked(group)
		if err != nil && !errors.Is(err, ErrTxnGap) {
			// The entries queued behind the failed ones cannot follow them.
			// (A gap means the group was numbered before a truncation or a
			// restore, which failed what was queued behind it already.)
			s.resyncQueueLocked(err)
		}
		s.wmu.Unlock()
		for _, p := range group {
			p.pre.release()
			p.pre = nil
			p.finish(err)
		}
	}
}

// workers run the committers of the shards and the log's writer, kept
// between bursts of commits (see gopool).
var workers = gopool.New(256)

// maxGroupPoints bounds one group commit (it is encoded in memory at once); a longer queue is committed in
// several groups, one after the other.
const maxGroupPoints = 1 << 20

// takeGroup removes the next group from the front of pending: every entry,
// or as many as fit in limit points (at least one).
func takeGroup(pending *[]*pendingEntry, limit int) []*pendingEntry {
	n, points := 0, 0
	for n < len(*pending) && (n == 0 || points+len((*pending)[n].e.Points) <= limit) {
		points += len((*pending)[n].e.Points)
		n++
	}
	group := (*pending)[:n:n]
	if n == len(*pending) {
		*pending = nil
	} else {
		*pending = (*pending)[n:]
	}
	return group
}

// commitLocked writes group (consecutive entries) to the write-ahead log,
// then to the memtable, then publishes the last txn id. It
// holds wmu.
func (s *boltShard) commitLocked(group []*pendingEntry) error {
	arrived := len(group) // until queued in the log
	defer func() { s.wal.depart(arrived) }()
	if s.closed() {
		return ErrClosed
	}
	first, last := group[0].e, group[len(group)-1].e
	if want := s.LastTxnID() + 1; first.TxnID != want {
		// Queued before a TruncateAfter or Restore renumbered the log.
		return fmt.Errorf("%w: got %d, want %d", ErrTxnGap, first.TxnID, want)
	}
	// Making room before the append keeps a commit all or nothing: an error
	// means none of the group is in. Usually that is a swap of memtables;
	// the flush runs beside later commits (flush.go).
	if s.flushDue(last.TxnID) {
		if err := s.rotate(); err != nil {
			return fmt.Errorf("engine: apply txns %d-%d: %w", first.TxnID, last.TxnID, err)
		}
	}
	entries := make([]Entry, len(group))
	encoded := make([][]byte, len(group)) // the points part of each payload
	for i, p := range group {
		entries[i], encoded[i] = p.e, p.pre.points
	}
	buf := logBufs.Get().(*[]byte)
	data, recs := frameEntries(*buf, s.id, s.inc, s.LastTerm(), entries, encoded)
	n := arrived
	arrived = 0
	recs, err := s.wal.appendArrived(data, recs, n)
	if cap(data) <= maxPooledBytes*16 { // the log keeps no reference once append returns
		*buf = data
		logBufs.Put(buf)
	}
	if err != nil {
		return fmt.Errorf("engine: apply txns %d-%d: %w", first.TxnID, last.TxnID, err)
	}
	s.q.mu.Lock()
	s.q.commits++
	s.q.mu.Unlock()
	s.lmu.Lock()
	for _, p := range logPositions(recs) {
		s.idx.add(p)
	}
	s.idx.trim(s.trimFloor.Load(), s.retain, s.retainBytes, s.flushedTxn.Load())
	s.lmu.Unlock()
	// Durable from here on; readers see the points once they are in the
	// memtable, and the txn id only after that.
	now := time.Now()
	mt := s.mems.Load().active
	for _, p := range group {
		mt.insert(p.e, &p.pre.keys, now)
	}
	s.accountMem()
	s.publish(last.TxnID, last.Term)
	return nil
}

// logBufs holds the buffers commits frame their records in: they were a
// tenth of the bytes a write allocated.
var logBufs = sync.Pool{New: func() any { return new([]byte) }}

// resyncQueueLocked fails every queued entry with err and numbers the next
// Append after the last committed entry again: after a failed commit, a
// TruncateAfter or a Restore. The caller holds wmu.
func (s *boltShard) resyncQueueLocked(err error) {
	q := &s.q
	q.mu.Lock()
	stale := q.pending
	q.pending = nil
	q.lastTxn, q.lastTerm = s.LastEntry()
	q.mu.Unlock()
	s.wal.depart(len(stale))
	for _, p := range stale {
		p.finish(err)
	}
}

// closeQueue fails what is queued and waits for the committer to exit.
func (s *boltShard) closeQueue() {
	q := &s.q
	q.mu.Lock()
	q.closed = true
	stale := q.pending
	q.pending = nil
	for q.running {
		q.idle.Wait()
	}
	q.mu.Unlock()
	s.wal.depart(len(stale))
	for _, p := range stale {
		p.finish(ErrClosed)
	}
}

// CommitCounter is implemented by the shards of NewBoltEngine (type-assert a
// Shard): LogCommits is how many group commits, one fsync of the log each,
// the shard made since it was opened.
type CommitCounter interface {
	LogCommits() uint64
}

func (s *boltShard) LogCommits() uint64 {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.q.commits
}
