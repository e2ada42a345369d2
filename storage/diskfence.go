package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DiskFence fences a storage node off writes while its disk fails: its
// write-ahead log failed, or a shard's flush into its file failed for lack
// of space or an I/O error. The engine reports the failures
// (engine.WithLogReport, engine.WithFlushReport); the fence logs each at
// ERROR once, answers every write with models.ErrInsufficientStorage at
// once, and puts the fault in the node record, from which the master hands
// the node's leaderships to in-sync replicas and the problems list names it.
// Run retries the log with backoff until a probe write succeeds; a failed
// flush is retried by its shard's flusher, which reports its first success.
// The fence lifts when neither is left: the replicas then catch up as
// followers and rejoin their in-sync sets, no restart.
type DiskFence struct {
	lg    *zap.Logger
	now   func() time.Time
	wake  chan struct{}
	gauge *prometheus.GaugeVec

	mu      sync.Mutex
	fault   *models.DiskFault            // the log's
	flushes map[string]*models.DiskFault // by shard id, of failing flushes
	// shown is faultLocked's answer, stored under mu at each change: every
	// write asks (Err), and with 32 senders on 2 cores a mutex there made
	// a convoy of the writers behind a holder the scheduler had preempted
	// (10 s of waiting in 13 s). The faults it points to are never changed.
	shown atomic.Pointer[models.DiskFault]
}

// maxFaultError bounds the error text kept in the node record.
const maxFaultError = 256

// NewDiskFence reports to lg; reg, when set, gets the gauge
// cairn_storage_disk_fault{kind}.
func NewDiskFence(lg *zap.Logger, reg prometheus.Registerer) *DiskFence {
	f := &DiskFence{lg: lg, now: time.Now, wake: make(chan struct{}, 1), flushes: map[string]*models.DiskFault{}}
	if reg != nil {
		f.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_storage_disk_fault",
			Help: "1 while this storage node refuses writes because its disk failed (disk_full: no space left; disk_error: another I/O error), in its write-ahead log or a shard file's flush"},
			[]string{"kind"})
		reg.MustRegister(f.gauge)
		f.setGauge(nil)
	}
	return f
}

// show makes fault the one shown (Fault, Err) and sets the gauge to it
// first, under mu: one who sees the fence lifted sees the gauge at 0, and
// two reports racing leave the gauge on the fault shown.
func (f *DiskFence) show(fault *models.DiskFault) {
	f.setGauge(fault)
	f.shown.Store(fault)
}

func (f *DiskFence) setGauge(fault *models.DiskFault) {
	if f.gauge == nil {
		return
	}
	for _, k := range []string{models.DiskFull, models.DiskError} {
		v := 0.0
		if fault != nil && k == fault.Kind {
			v = 1
		}
		f.gauge.WithLabelValues(k).Set(v)
	}
}

// diskFault describes err, a failed write to the disk.
func (f *DiskFence) diskFault(err error) *models.DiskFault {
	fault := &models.DiskFault{Kind: models.DiskError, Error: err.Error(), Since: f.now().UnixMilli()}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		fault.Kind = models.DiskFull
	}
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		fault.Path = pe.Path
	}
	if len(fault.Error) > maxFaultError {
		fault.Error = fault.Error[:maxFaultError] + "..."
	}
	return fault
}

// isDiskFailure: err is the disk's refusal (no space, quota, read-only, an
// I/O error), not a refusal of what was written (a key too large).
func isDiskFailure(err error) bool {
	for _, errno := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// Report is the engine's log report: the log stopped with err.
func (f *DiskFence) Report(err error) {
	fault := f.diskFault(err)
	f.mu.Lock()
	f.fault = fault
	f.show(f.faultLocked())
	f.mu.Unlock()
	f.lg.Error("write-ahead log failed: this node takes no writes, hands its shard leaderships to in-sync replicas and retries by itself",
		zap.String("kind", fault.Kind), zap.String("path", fault.Path), zap.Error(err))
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// ReportFlush is the engine's flush report: a shard's background flush
// failed with err, or flushes again (err nil). A disk failure fences the
// node as a failed log does; other failures are FlushFailures' alone.
func (f *DiskFence) ReportFlush(db string, shard int, err error) {
	id := models.ShardID(db, shard)
	disk := err != nil && isDiskFailure(err)
	f.mu.Lock()
	_, had := f.flushes[id]
	switch {
	case err == nil:
		delete(f.flushes, id)
	case disk && !had:
		f.flushes[id] = f.diskFault(err)
	}
	fault := f.faultLocked()
	f.show(fault)
	f.mu.Unlock()
	switch {
	case disk && !had:
		f.lg.Error("shard flush failed on the disk: this node takes no writes, hands its shard leaderships to in-sync replicas and retries by itself",
			zap.String("db", db), zap.Int("shard", shard), zap.Error(err))
	case err == nil && had && fault == nil:
		f.lg.Info("shard files take writes again: this node rejoins its in-sync sets once caught up", zap.String("db", db), zap.Int("shard", shard))
	}
}

// faultLocked is the fault shown: the log's, else the first failing
// flush's. The caller holds mu.
func (f *DiskFence) faultLocked() *models.DiskFault {
	if f.fault != nil {
		return f.fault
	}
	var first string
	for id := range f.flushes {
		if first == "" || id < first {
			first = id
		}
	}
	return f.flushes[first]
}

// Fault is the node record's disk_fault: nil while the node takes writes.
func (f *DiskFence) Fault() *models.DiskFault {
	fault := f.shown.Load()
	if fault == nil {
		return nil
	}
	c := *fault
	return &c
}

// Err is nil while the node takes writes, else why not (a
// models.ErrInsufficientStorage).
func (f *DiskFence) Err() error {
	fault := f.Fault()
	if fault == nil {
		return nil
	}
	return fmt.Errorf("%w: this storage node cannot accept writes (%s at %s: %s); it retries by itself",
		models.ErrInsufficientStorage, fault.Kind, fault.Path, fault.Error)
}

// Retry bounds of the log's healing.
const (
	healMin = 250 * time.Millisecond
	healMax = 5 * time.Second
)

// Run heals the log after each failure until ctx ends: with backoff, until
// a probe write succeeds, then lifts the fence.
func (f *DiskFence) Run(ctx context.Context, log engine.LogHealer) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		bo := backoff.New(healMin, healMax)
		var fault *models.DiskFault
		for {
			if !bo.Wait(ctx) {
				return
			}
			f.mu.Lock()
			fault = f.fault // a failure reported after this is healed in the next round
			f.mu.Unlock()
			err := log.HealLog()
			if err == nil {
				break
			}
			f.lg.Debug("write-ahead log still fails", zap.Error(err))
		}
		f.mu.Lock()
		lifted := fault != nil && f.fault == fault
		if lifted {
			f.fault = nil
		}
		now := f.faultLocked()
		if lifted {
			f.show(now)
		}
		f.mu.Unlock()
		if lifted {
			msg := "write-ahead log takes writes again: this node rejoins its in-sync sets once caught up"
			if now != nil {
				msg = "write-ahead log takes writes again; a shard's flush still fails, so the node stays fenced"
			}
			f.lg.Info(msg,
				zap.String("kind", fault.Kind), zap.String("path", fault.Path),
				zap.Duration("fenced_for", f.now().Sub(time.UnixMilli(fault.Since)).Round(time.Millisecond)))
		}
	}
}
