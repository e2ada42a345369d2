package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DiskFence fences a storage node off writes while its write-ahead log is
// failed (a full or failing disk). The engine reports the failure
// (engine.WithLogReport); the fence logs it once at ERROR, answers every
// write with models.ErrInsufficientStorage at once, and puts the fault in
// the node record, from which the master hands the node's leaderships to
// in-sync replicas and the problems list names it. Run retries the log with
// backoff and lifts the fence once a probe write succeeds: the replicas
// then catch up as followers and rejoin their in-sync sets, no restart.
type DiskFence struct {
	lg    *zap.Logger
	now   func() time.Time
	wake  chan struct{}
	gauge *prometheus.GaugeVec

	mu    sync.Mutex
	fault *models.DiskFault
}

// maxFaultError bounds the error text kept in the node record.
const maxFaultError = 256

// NewDiskFence reports to lg; reg, when set, gets the gauge
// cairn_storage_disk_fault{kind}.
func NewDiskFence(lg *zap.Logger, reg prometheus.Registerer) *DiskFence {
	f := &DiskFence{lg: lg, now: time.Now, wake: make(chan struct{}, 1)}
	if reg != nil {
		f.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_storage_disk_fault",
			Help: "1 while this storage node refuses writes because its write-ahead log failed (disk_full: no space left; disk_error: another I/O error)"},
			[]string{"kind"})
		reg.MustRegister(f.gauge)
		f.setGauge("")
	}
	return f
}

func (f *DiskFence) setGauge(kind string) {
	if f.gauge == nil {
		return
	}
	for _, k := range []string{models.DiskFull, models.DiskError} {
		v := 0.0
		if k == kind {
			v = 1
		}
		f.gauge.WithLabelValues(k).Set(v)
	}
}

// Report is the engine's log report: the log stopped with err.
func (f *DiskFence) Report(err error) {
	fault := &models.DiskFault{Kind: models.DiskError, Error: err.Error(), Since: f.now().UnixMilli()}
	if errors.Is(err, syscall.ENOSPC) {
		fault.Kind = models.DiskFull
	}
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		fault.Path = pe.Path
	}
	if len(fault.Error) > maxFaultError {
		fault.Error = fault.Error[:maxFaultError] + "..."
	}
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
	f.setGauge(fault.Kind)
	f.lg.Error("write-ahead log failed: this node takes no writes, hands its shard leaderships to in-sync replicas and retries by itself",
		zap.String("kind", fault.Kind), zap.String("path", fault.Path), zap.Error(err))
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Fault is the node record's disk_fault: nil while the node takes writes.
func (f *DiskFence) Fault() *models.DiskFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fault == nil {
		return nil
	}
	c := *f.fault
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
		f.mu.Unlock()
		if lifted {
			f.setGauge("")
			f.lg.Info("write-ahead log takes writes again: this node rejoins its in-sync sets once caught up",
				zap.String("kind", fault.Kind), zap.String("path", fault.Path),
				zap.Duration("fenced_for", f.now().Sub(time.UnixMilli(fault.Since)).Round(time.Millisecond)))
		}
	}
}
