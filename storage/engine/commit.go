package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/internal/gopool"
)

// Group commit. Append only queues an entry (Stage, its checks and encoding,
// in the writer's goroutine and in no order; Enqueue, its numbering and
// queueing, in log order under the queue's lock); one committer goroutine per
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
	// arriving: counted as on its way to the log (wal.gather); set under
	// the queue's lock.
	arriving bool
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
	commits  atomic.Uint64 // log commits (one fsync each) done by the committer
}

// NextTxnID is the txn id the next Append or Apply must carry.
func (s *boltShard) NextTxnID() uint64 {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.q.lastTxn + 1
}

// Staged is an entry made ready for the log ahead of its place in it
// (Stage): its points checked, encoded and their keys built. What must
// happen in log order is then only the numbering and the queueing
// (Enqueue), which writers of a shard do one at a time: with the encoding
// and the checks inside that section, 32 senders spent most of a write
// waiting for it (issue 21).
type Staged struct {
	// Entry is the entry staged; TxnID 0 takes the next txn id at Enqueue.
	Entry Entry
	p     *pendingEntry // the queue element the bolt engine staged; nil once queued
}

// Stage checks and prepares e for Enqueue, outside any lock the caller
// holds for the log order. A key no flush could write, or a malformed
// delete, is refused here, before it is numbered, logged or in a
// memtable: nothing of the entry is kept. A Staged not queued is left to
// the collector.
func (s *boltShard) Stage(e Entry) (*Staged, error) {
	pre := e.Prepared // see prepare.go
	if pre == nil {
		pre = Prepare(e.Points)
	}
	e.Prepared = nil // the queue's pre owns it
	err := pre.keys.check()
	if err == nil {
		err = checkEntry(&e)
	}
	if err != nil {
		pre.release()
		return nil, err
	}
	return &Staged{Entry: e, p: &pendingEntry{e: e, pre: pre, done: make(chan struct{})}}, nil
}

// Enqueue numbers st (st.Entry.TxnID, or the next txn id when 0) and
// queues it for the next group commit: the returned wait blocks until it is
// durable and visible (nil) or failed. It is the only part of a write done
// in log order, and takes the queue's lock alone.
func (s *boltShard) Enqueue(st *Staged) (uint64, func() error, error) {
	p := st.p
	if p == nil {
		return 0, nil, errNotStaged
	}
	st.p = nil
	q := &s.q
	q.mu.Lock()
	want := q.lastTxn + 1
	if p.e.TxnID == 0 {
		p.e.TxnID = want
	}
	var err error
	switch {
	case q.closed:
		err = ErrClosed
	case p.e.TxnID != want:
		err = fmt.Errorf("%w: got %d, want %d", ErrTxnGap, p.e.TxnID, want)
	case p.e.Term < q.lastTerm:
		err = fmt.Errorf("%w: got %d, last %d", ErrTermRegress, p.e.Term, q.lastTerm)
	}
	if err != nil {
		q.mu.Unlock()
		p.pre.release()
		return 0, nil, err
	}
	start := !q.running
	if start {
		// The committer it starts brings it to the log at once. Behind a
		// commit under way it counts only once its committer takes it
		// (commitLoop): it cannot reach the log before that commit's
		// write ends, so the leader would wait for it in vain.
		q.markArriving([]*pendingEntry{p}, s.wal)
	}
	q.pending = append(q.pending, p)
	q.lastTxn, q.lastTerm = p.e.TxnID, p.e.Term
	q.running = true
	q.mu.Unlock()
	if start {
		// Outside the lock: the committer takes what is queued by the
		// time it runs, and only one is started while one runs.
		workers.Go(s.commitLoop)
	}
	return p.e.TxnID, p.wait, nil
}

// errNotStaged is an Enqueue of a Staged this shard did not make, or one
// queued already.
var errNotStaged = errors.New("engine: entry not staged by this shard, or queued already")

// Append queues e for the next group commit and returns at once. The returned
// wait blocks until e is durable and visible (nil) or failed. e.TxnID must
// be the next txn id.
func (s *boltShard) Append(e Entry) (func() error, error) {
	if e.TxnID == 0 {
		return nil, fmt.Errorf("%w: got 0", ErrTxnGap)
	}
	st, err := s.Stage(e)
	if err != nil {
		return nil, err
	}
	_, wait, err := s.Enqueue(st)
	return wait, err
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
		q.markArriving(group, s.wal)
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

// markArriving counts the entries of group not counted yet as arriving at
// the log (see wal.gather); the caller holds q.mu.
func (q *commitQueue) markArriving(group []*pendingEntry, w *wal) {
	n := 0
	for _, p := range group {
		if !p.arriving {
			p.arriving = true
			n++
		}
	}
	w.arrive(n)
}

// arrivingIn is how many of entries count as arriving at the log.
func arrivingIn(entries []*pendingEntry) int {
	n := 0
	for _, p := range entries {
		if p.arriving {
			n++
		}
	}
	return n
}

// workers run the committers of the shards, kept between bursts of commits
// (see gopool).
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
		// Making room may wait for the flush of the memtable frozen
		// before: the log's leader does not wait for this group meanwhile.
		s.wal.depart(arrived)
		arrived = 0
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
	s.q.commits.Add(1)
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
	s.wakeFlusher()
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
	s.wal.depart(arrivingIn(stale))
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
	s.wal.depart(arrivingIn(stale))
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

func (s *boltShard) LogCommits() uint64 { return s.q.commits.Load() }
