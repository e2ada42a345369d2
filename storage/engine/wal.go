package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The write-ahead log: one per engine, so one per node, shared by all its
// shard replicas. A commit of any shard is one record appended to the active
// segment file; the commits of different shards that arrive while a write is
// under way are written together with one write and one fdatasync (group
// commit across shards), so the cost of durability no longer grows with the
// number of shards a batch is split into. Records are length-prefixed and
// checksummed: a crash can only leave a torn tail, which the next open cuts.
//
// A record carries the shard's incarnation, a random id its bbolt file holds
// (new at creation, at a restore and at the migration of a file of the
// previous format): a recreated or restored shard never picks up the records
// of the replica it replaced, which drops them logically. A segment is removed
// once every record in it is below its shard's persisted log start, or
// belongs to a replica that no longer exists.
//
//	record  u32 LE body length | u32 LE CRC-32C of body | body
//	body    kind | uvarint incarnation | uvarint len(db) db | uvarint shard |
//	        uvarint txn | uvarint term | uvarint prevTerm | payload
//
// kind recEntry: payload is the encoded Entry txn (prevTerm is the term of
// txn-1, so a shard whose older records were removed still knows the term
// before its first entry). kind recTruncate: the shard's log was cut after
// txn, whose term is term; no payload.

// segment is one log file. Only the last segment is written to; the others
// are immutable.
type segment struct {
	seq  uint64
	path string
	f    *os.File
	size int64 // guarded by wal.mu
	// alloc is the file's size when made ahead full of zeros (walspare.go),
	// 0 when it grows with its records; guarded by wal.wrMu.
	alloc int64
	// holders is the highest txn each incarnation has in the segment;
	// guarded by wal.mu.
	holders map[uint64]holder
	removed bool // guarded by wal.rmu
}

type holder struct {
	db     string
	shard  int
	maxTxn uint64
}

// walReq is one caller's records waiting for the next group write.
type walReq struct {
	data []byte   // framed records, back to back
	recs []walRec // their headers; pos.off is the payload's offset in data
	// wake is sent to once: the group holding the request was written
	// (err is set), or, with lead set, its caller is to write the next
	// group itself.
	wake chan struct{}
	lead bool
	err  error
}

type wal struct {
	dir      string
	segBytes int64
	lock     *os.File // dir/LOCK, held while the log is open

	// wrMu is held while a group is written, and to replace the active
	// segment, so no write lands in a segment being removed.
	wrMu sync.Mutex
	// rmu is held shared by readers of segment files and exclusively to
	// remove one, so a read never meets a closed file.
	rmu sync.RWMutex

	mu      sync.Mutex
	idle    *sync.Cond // signalled when writing ends
	segs    []*segment // oldest first; the last is the active one
	queue   []*walReq
	writing bool
	closed  bool
	err     error               // after a failed write nothing more is appended until heal
	scanned map[uint64][]walRec // records found at open, by incarnation, until their shard takes them
	live    map[uint64]*liveInc
	buf     []byte
	groups  uint64 // group writes done, one fdatasync each
	// arriving counts entries on their way to append (see gather);
	// arrived is signalled when it drops to zero; gatherWait bounds the
	// leader's wait for them (a test's knob).
	arriving   atomic.Int64
	arrived    chan struct{}
	gatherWait time.Duration
	inGroup    int         // requests in the group being written
	faults     *Faults     // the file layer's seam (walheal.go); nil: none
	report     func(error) // told once per failure (WithLogReport)

	cmu sync.Mutex // one collect at a time

	// spareMu is held while the next segment is made ahead (walspare.go)
	// and to take or drop it.
	spareMu sync.Mutex
	spare   *segment // guarded by spareMu; not in segs
}

// liveInc is an incarnation in use by an open shard (or being put in place
// by a restore): released is the txn up to which its records may go.
type liveInc struct {
	released atomic.Uint64
	id       shardID
}

func segName(seq uint64) string { return fmt.Sprintf("%016x.wal", seq) }

// openWAL scans the segments in dir, cuts a torn tail off the last one and
// opens it for appending.
func openWAL(dir string, segBytes int64) (*wal, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("engine: create log dir: %w", err)
	}
	lock, err := lockDir(dir, 5*time.Second)
	if err != nil {
		return nil, err
	}
	w := &wal{dir: dir, segBytes: segBytes, lock: lock, scanned: make(map[uint64][]walRec), live: make(map[uint64]*liveInc),
		arrived: make(chan struct{}, 1), gatherWait: gatherWait}
	w.idle = sync.NewCond(&w.mu)
	names, err := os.ReadDir(dir)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("engine: read log dir: %w", err)
	}
	var seqs []uint64
	for _, de := range names {
		if strings.HasSuffix(de.Name(), spareSuffix) {
			// Made ahead and never taken (a crash): not a segment.
			if err := os.Remove(filepath.Join(dir, de.Name())); err != nil {
				_ = lock.Close()
				return nil, fmt.Errorf("engine: remove unused log segment: %w", err)
			}
			continue
		}
		name, ok := strings.CutSuffix(de.Name(), ".wal")
		if !ok || de.Name() == "LOCK" {
			continue
		}
		seq, err := strconv.ParseUint(name, 16, 64)
		if err != nil || len(name) != 16 {
			_ = lock.Close()
			return nil, fmt.Errorf("%w: unexpected file %s", ErrWALCorrupt, filepath.Join(dir, de.Name()))
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for i, seq := range seqs {
		if err := w.scanSegment(seq, i == len(seqs)-1); err != nil {
			_ = w.closeFiles()
			return nil, err
		}
	}
	if len(w.segs) == 0 {
		if _, err := w.newSegment(1); err != nil {
			_ = w.closeFiles()
			return nil, err
		}
	}
	w.prepareSpareAfter(w.segs[len(w.segs)-1].seq)
	return w, nil
}

// scanSegment indexes the records of one segment. A bad record ends the
// last segment (a write the crash interrupted, never acknowledged, or the
// unused zeros of a segment made ahead: the file is cut there); anywhere
// else it is corruption (a roll-over cuts the zeros off the segment it
// leaves, walspare.go).
func (w *wal) scanSegment(seq uint64, last bool) error {
	path := filepath.Join(w.dir, segName(seq))
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("engine: read log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("engine: open log %s: %w", path, err)
	}
	seg := &segment{seq: seq, path: path, f: f, holders: make(map[uint64]holder)}
	w.segs = append(w.segs, seg)
	off := 0
	for off < len(data) {
		r, poff, size, ok := parseRecord(data[off:])
		if !ok {
			break
		}
		r.pos = walPos{seg: seg, off: int64(off + poff), n: size - poff}
		w.scanned[r.inc] = append(w.scanned[r.inc], r)
		seg.hold(r)
		off += size
	}
	seg.size = int64(off)
	if off == len(data) {
		return nil
	}
	if !last {
		return fmt.Errorf("%w: %s: bad record at offset %d", ErrWALCorrupt, path, off)
	}
	if err := f.Truncate(int64(off)); err != nil {
		return fmt.Errorf("engine: cut torn tail of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("engine: cut torn tail of %s: %w", path, err)
	}
	return nil
}

func (s *segment) hold(r walRec) {
	h := s.holders[r.inc]
	s.holders[r.inc] = holder{db: r.db, shard: r.shard, maxTxn: max(h.maxTxn, r.txn)}
}

// newSegment creates segment seq and makes it the active one. The caller
// holds wrMu, or has the log to itself.
func (w *wal) newSegment(seq uint64) (*segment, error) {
	path := filepath.Join(w.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("engine: create log segment: %w", err)
	}
	if err := syncDir(w.dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	seg := &segment{seq: seq, path: path, f: f, holders: make(map[uint64]holder)}
	w.mu.Lock()
	w.segs = append(w.segs, seg)
	w.mu.Unlock()
	return seg, nil
}

// take hands a shard the records found at open for its incarnation.
func (w *wal) take(inc uint64) []walRec {
	w.mu.Lock()
	defer w.mu.Unlock()
	recs := w.scanned[inc]
	delete(w.scanned, inc)
	return recs
}

// register marks inc live; the returned value is the txn up to which its
// records are no longer needed (0: all are).
func (w *wal) register(inc uint64, id shardID) *atomic.Uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &liveInc{id: id}
	w.live[inc] = v
	return &v.released
}

func (w *wal) unregister(inc uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.live, inc)
}

// append writes records (framed by appendRecord, headers in recs) durably,
// together with those of other callers queued meanwhile, and returns their
// payload positions.
func (w *wal) append(data []byte, recs []walRec) ([]walRec, error) {
	return w.appendArrived(data, recs, 0)
}

// Commits gather. Entries count as arriving from the moment a shard's
// committer takes them (or an Append starts one for them) until their
// records are queued here (appendArrived) or they fail, and the leader,
// before it takes a group, waits for those on their way, for gatherWait at
// most. A batch's entries reach the log microseconds apart, one per shard:
// the first to arrive started a write and its fdatasync, and those after it
// waited for that and then made a second (at 32 shards a batch took about 3
// syncs and syncing was a fifth of a write's CPU). The leader sleeps until
// the last one queues itself, which wakes it: it used to yield its
// processor up to 16 times instead, and entries queued behind a shard's
// commit under way counted as arriving too, so on a busy node every group
// waited the 16 yields, each behind every runnable goroutine (200-300 ms
// with 32 senders on 2 cores; issue 21).
func (w *wal) arrive(n int) { w.arriving.Add(int64(n)) }

// depart uncounts n arriving entries: appended, or that will not be.
func (w *wal) depart(n int) {
	if n > 0 && w.arriving.Add(-int64(n)) == 0 {
		w.signalArrived()
	}
}

func (w *wal) signalArrived() {
	select {
	case w.arrived <- struct{}{}:
	default: // the leader has a wake-up pending already
	}
}

// gatherWait bounds the leader's wait for arriving entries: one held up
// (a shard waiting for its flush, say) is not waited for long.
const gatherWait = 2 * time.Millisecond

func (w *wal) gather() {
	if w.arriving.Load() <= 0 {
		return
	}
	t := time.NewTimer(w.gatherWait)
	defer t.Stop()
	for w.arriving.Load() > 0 {
		select {
		case <-w.arrived: // perhaps an old signal: look again
		case <-t.C:
			return
		}
	}
}

// appendArrived is append for records of arrived entries (n of them), which
// stop counting as arriving once queued.
//
// The log has no writer goroutine of its own: the caller that finds it idle
// writes and syncs the group itself (it leads), and those that queue while
// it does wait. The leader, once its group is durable, hands the next group
// (everything queued meanwhile) to the first caller queued, or marks the
// log idle, and then wakes the callers of its group. A lone commit thus
// reaches the disk without another goroutine running, and one under load
// is woken once, either to lead or because it is written: with a writer
// goroutine every commit took two hand-offs more (to the writer and back),
// each a wait behind every runnable goroutine on a busy node (issue 21).
func (w *wal) appendArrived(data []byte, recs []walRec, arrived int) ([]walRec, error) {
	req := &walReq{data: data, recs: recs, wake: make(chan struct{}, 1)}
	w.mu.Lock()
	w.depart(arrived) // under mu, with the queueing: the leader takes both or neither
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return nil, err
	}
	w.queue = append(w.queue, req)
	lead := !w.writing
	w.writing = true
	w.mu.Unlock()
	if !lead {
		<-req.wake
		if !req.lead {
			return req.recs, req.err
		}
	}
	w.lead(req)
	return req.recs, req.err
}

// lead writes the queue, which holds the leader's request, as one group,
// then passes the lead on (see appendArrived).
func (w *wal) lead(own *walReq) {
	w.gather()
	w.mu.Lock()
	group := w.queue
	w.queue = nil
	err := w.err
	w.inGroup = len(group)
	w.mu.Unlock()
	if err == nil {
		if err = w.writeGroup(group); err != nil {
			err = w.failed(err)
		}
	}
	w.mu.Lock()
	w.inGroup = 0
	if len(w.queue) == 0 {
		w.writing = false
		w.idle.Broadcast()
	} else {
		next := w.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	}
	w.mu.Unlock()
	for _, r := range group {
		r.err = err
		if r != own {
			r.wake <- struct{}{}
		}
	}
}

func (w *wal) writeGroup(group []*walReq) error {
	w.wrMu.Lock()
	defer w.wrMu.Unlock()
	n := 0
	for _, r := range group {
		n += len(r.data)
	}
	w.mu.Lock()
	seg := w.segs[len(w.segs)-1]
	size := seg.size
	w.mu.Unlock()
	if size > 0 && size+int64(n) > w.segBytes {
		// w.segs is read under mu only: a collect may slice it meanwhile.
		next, err := w.nextSegment(seg.seq + 1)
		if err != nil {
			return err
		}
		seg, size = next, 0
	}
	data := group[0].data
	if len(group) > 1 {
		w.buf = w.buf[:0]
		for _, r := range group {
			w.buf = append(w.buf, r.data...)
		}
		data = w.buf
	}
	if _, err := w.faults.writeAt(seg.f, data, size); err != nil {
		return err // an *os.PathError: it names the file
	}
	if err := w.faults.sync(seg.f); err != nil {
		return fmt.Errorf("sync %s: %w", seg.path, err)
	}
	if cap(w.buf) > 16<<20 {
		w.buf = nil // one huge group does not pin its buffer
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	at := size
	for _, r := range group {
		for i := range r.recs {
			r.recs[i].pos.seg = seg
			r.recs[i].pos.off += at
			seg.hold(r.recs[i])
		}
		at += int64(len(r.data))
	}
	seg.size = at
	w.groups++
	return nil
}

// read returns the payload at p; ErrCompacted if its segment was removed.
func (w *wal) read(p walPos, buf []byte) ([]byte, error) {
	w.rmu.RLock()
	defer w.rmu.RUnlock()
	if p.seg.removed {
		return nil, fmt.Errorf("%w: log segment removed", ErrCompacted)
	}
	buf = slices.Grow(buf[:0], p.n)[:p.n]
	if _, err := p.seg.f.ReadAt(buf, p.off); err != nil {
		return nil, fmt.Errorf("engine: read log %s: %w", p.seg.path, err)
	}
	return buf, nil
}

// collect removes the oldest segments while none of their records is still
// needed: those of a live incarnation are needed above what it released;
// those of another are dead if a live one has the same shard id (a restore
// or a recreation replaced it) or if exists says the shard has no file
// (dropped), and kept otherwise (a shard not opened since the start). When
// that is every segment, the active one is replaced by a new one first.
func (w *wal) collect(exists func(id shardID) bool) error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	ids := make(map[shardID]bool, len(w.live))
	for _, l := range w.live {
		ids[l.id] = true
	}
	needed := func(seg *segment) bool {
		for inc, h := range seg.holders {
			if l, ok := w.live[inc]; ok {
				if h.maxTxn > l.released.Load() {
					return true
				}
			} else if id := (shardID{h.db, h.shard}); !ids[id] && exists(id) {
				return true
			}
		}
		return false
	}
	// The records found at open of a replica that is gone are not kept for
	// an Open either.
	for inc, recs := range w.scanned {
		if _, ok := w.live[inc]; !ok && len(recs) > 0 {
			if id := (shardID{recs[0].db, recs[0].shard}); ids[id] || !exists(id) {
				delete(w.scanned, inc)
			}
		}
	}
	var drop []*segment
	for i, seg := range w.segs {
		if needed(seg) {
			break
		}
		if i == len(w.segs)-1 {
			if seg.size == 0 {
				break
			}
			// Every record of the active segment is unneeded: start a new one
			// unless a write is under way (a later collect will).
			if !w.wrMu.TryLock() {
				break
			}
			w.mu.Unlock()
			_, err := w.nextSegment(seg.seq + 1)
			w.wrMu.Unlock()
			w.mu.Lock()
			if err != nil {
				w.mu.Unlock()
				return err
			}
		}
		drop = append(drop, seg)
	}
	w.segs = w.segs[len(drop):]
	w.mu.Unlock()
	if len(drop) == 0 {
		return nil
	}
	w.rmu.Lock()
	for _, seg := range drop {
		seg.removed = true
	}
	w.rmu.Unlock()
	var errs []error
	for _, seg := range drop {
		_ = seg.f.Close()
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: remove log segment: %w", err)
	}
	return syncDir(w.dir)
}

// close waits for the group being written, and those queued behind it, and
// closes the files.
func (w *wal) close() error {
	w.cmu.Lock() // no collect under way
	defer w.cmu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	for w.writing {
		w.idle.Wait()
	}
	w.mu.Unlock()
	w.dropSpare()
	return w.closeFiles()
}

func (w *wal) closeFiles() error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	errs := []error{w.lock.Close()} // releases the lock
	for _, seg := range w.segs {
		if err := seg.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// walSize is the bytes of every segment, for tests and metrics.
func (w *wal) walSize() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, seg := range w.segs {
		n += seg.size
	}
	return n
}

// handBack keeps a closing shard's log for its next Open in this process
// (as the records found at open would be) and marks its incarnation no
// longer live: its records stay while its file exists.
func (w *wal) handBack(inc uint64, id shardID, l *logIndex) {
	recs := make([]walRec, 0, len(l.pos)+1)
	// A cut at base starts the log with base's term.
	recs = append(recs, walRec{kind: recTruncate, inc: inc, db: id.db, shard: id.shard, txn: l.base, term: l.baseTerm})
	for i, p := range l.pos {
		recs = append(recs, walRec{kind: recEntry, inc: inc, db: id.db, shard: id.shard,
			txn: l.base + uint64(i) + 1, term: p.term, pos: p.walPos})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scanned[inc] = recs
	delete(w.live, inc)
}
