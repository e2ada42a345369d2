package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// A log write that fails (a full disk, an I/O error) stops the log: nothing
// more is appended, so no entry can land after a hole, and every commit
// fails at once with ErrLogFailed. The failure is no longer for good: once
// the disk takes writes again, HealLog cuts what the failed write left past
// the last durable record, checks that a write and its sync succeed, and
// lets commits through again, without a restart.

// ErrLogFailed: a write or sync of the write-ahead log failed; the engine
// takes no writes until HealLog succeeds. The cause (e.g. syscall.ENOSPC)
// is in the chain.
var ErrLogFailed = errors.New("engine: write-ahead log failed")

// LogHealer is implemented by the engine of NewBoltEngine (type-assert an
// Engine): a node fences itself while its log is failed and heals it.
type LogHealer interface {
	// LogFailure is the error that stopped the log (wrapping ErrLogFailed);
	// nil while it takes writes.
	LogFailure() error
	// HealLog makes a stopped log take writes again, or says why it cannot
	// yet. It is a no-op on a working log.
	HealLog() error
}

// WithLogReport has f told, once per failure, of the error that stopped the
// write-ahead log. It runs on the commit that writes the failed group: it
// must not block or write.
func WithLogReport(f func(err error)) Option {
	return func(o *options) { o.logReport = f }
}

// Faults makes the engine's log writes and syncs fail as a failing disk
// would: the seam through which tests, and a node started with fault
// injection enabled, exercise the fencing without filling a real disk. A
// failing write first writes half its bytes, as a disk that runs out of
// space mid-write does. The zero value (and nil) injects nothing.
type Faults struct {
	err   atomic.Pointer[error]
	flush atomic.Pointer[error] // SetFlush's
}

// WithFaults has the engine's log writes go through f.
func WithFaults(f *Faults) Option {
	return func(o *options) { o.faults = f }
}

// Set makes every following log write and sync fail with err (e.g.
// syscall.ENOSPC); nil lets them through again.
func (f *Faults) Set(err error) {
	if err == nil {
		f.err.Store(nil)
		return
	}
	f.err.Store(&err)
}

// SetFlush makes every following flush of a memtable into a shard file fail
// with err as the file's write would (the log is untouched); nil lets them
// through again.
func (f *Faults) SetFlush(err error) {
	if err == nil {
		f.flush.Store(nil)
		return
	}
	f.flush.Store(&err)
}

// flushFault is the error a flush into the file at path meets, nil when
// none is injected.
func (f *Faults) flushFault(path string) error {
	if f == nil {
		return nil
	}
	if p := f.flush.Load(); p != nil {
		return &os.PathError{Op: "write", Path: path, Err: *p}
	}
	return nil
}

// Injected is the error being injected, nil when none.
func (f *Faults) Injected() error {
	if f == nil {
		return nil
	}
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *Faults) writeAt(file *os.File, b []byte, off int64) (int, error) {
	if err := f.Injected(); err != nil {
		n, _ := file.WriteAt(b[:len(b)/2], off)
		return n, &os.PathError{Op: "write", Path: file.Name(), Err: err}
	}
	return file.WriteAt(b, off)
}

func (f *Faults) sync(file *os.File) error {
	if err := f.Injected(); err != nil {
		return &os.PathError{Op: "sync", Path: file.Name(), Err: err}
	}
	return fdatasync(file)
}

// failed records the first error of a group write and reports it.
func (w *wal) failed(err error) error {
	w.mu.Lock()
	first := w.err == nil
	if first {
		w.err = fmt.Errorf("%w: %w", ErrLogFailed, err)
	}
	err = w.err
	w.mu.Unlock()
	if first && w.report != nil {
		w.report(err)
	}
	return err
}

// probeBytes is the size of the write that proves the disk takes writes
// again: a few pages, as a small group commit is.
const probeBytes = 64 << 10

// heal cuts the active segment back to its last durable record (a failed
// write may have left part of a record past it, which a later record would
// turn into corruption in the middle of the file), removes the next
// segment if a failed roll-over created it, writes and syncs a probe file,
// and clears the failure.
func (w *wal) heal() error {
	w.wrMu.Lock()
	defer w.wrMu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.err == nil {
		w.mu.Unlock()
		return nil
	}
	seg := w.segs[len(w.segs)-1]
	size := seg.size
	w.mu.Unlock()
	if err := seg.f.Truncate(size); err != nil {
		return fmt.Errorf("engine: cut failed write off %s: %w", seg.path, err)
	}
	w.dropSpare()
	next := filepath.Join(w.dir, segName(seg.seq+1))
	if err := os.Remove(next); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine: remove half-made segment: %w", err)
	}
	if err := w.probe(); err != nil {
		return err
	}
	if err := w.faults.sync(seg.f); err != nil {
		return fmt.Errorf("engine: sync %s: %w", seg.path, err)
	}
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()
	w.prepareSpareAfter(seg.seq)
	return nil
}

// probe writes probeBytes to a file beside the segments, syncs and removes
// it. Its name is not a segment's: an open skips it if a crash left it.
func (w *wal) probe() error {
	path := filepath.Join(w.dir, "probe")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("engine: probe the log disk: %w", err)
	}
	_, err = w.faults.writeAt(f, make([]byte, probeBytes), 0)
	if err == nil {
		err = w.faults.sync(f)
	}
	err = errors.Join(err, f.Close(), os.Remove(path))
	if err != nil {
		return fmt.Errorf("engine: probe the log disk: %w", err)
	}
	return nil
}

func (e *boltEngine) LogFailure() error {
	e.wal.mu.Lock()
	defer e.wal.mu.Unlock()
	return e.wal.err
}

func (e *boltEngine) HealLog() error { return e.wal.heal() }
