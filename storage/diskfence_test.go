package storage

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDiskFenceFencesAndHealsByItself: a log write failing for lack of
// space fences the node (one ERROR naming the cause and the file, a
// disk_full fault, a 507 error, the gauge at 1) while further writes fail
// at once without another ERROR; once the disk takes writes again the
// fence's retries heal the log and lift the fence, and writes go on.
func TestDiskFenceFencesAndHealsByItself(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	fence := NewDiskFence(zap.New(core), reg)
	faults := &engine.Faults{}
	eng, err := engine.NewBoltEngine(t.TempDir(), engine.WithFaults(faults), engine.WithLogReport(fence.Report))
	require.NoError(t, err)
	defer eng.Close()
	s, err := eng.Open("db", 0)
	require.NoError(t, err)
	entry := func(txn uint64) engine.Entry {
		return engine.Entry{TxnID: txn, Term: 1, Points: []lineproto.Point{{Metric: "m", Field: "value", TS: int64(txn), Value: 1.0}}}
	}
	require.NoError(t, s.Apply(entry(1)))
	require.NoError(t, fence.Err())
	require.Nil(t, fence.Fault())
	require.Equal(t, 0.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskFull)))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); fence.Run(ctx, eng.(engine.LogHealer)) }()
	defer func() { cancel(); wg.Wait() }()

	faults.Set(syscall.ENOSPC)
	require.ErrorIs(t, s.Apply(entry(2)), syscall.ENOSPC)
	require.ErrorIs(t, s.Apply(entry(2)), engine.ErrLogFailed)
	f := fence.Fault()
	require.NotNil(t, f)
	require.Equal(t, models.DiskFull, f.Kind)
	require.Contains(t, f.Path, ".wal")
	require.Contains(t, f.Error, "no space left on device")
	require.ErrorIs(t, fence.Err(), models.ErrInsufficientStorage)
	require.Contains(t, fence.Err().Error(), f.Path)
	require.Equal(t, 1.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskFull)))
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	require.Len(t, errs, 1, "one ERROR per failure")
	require.Equal(t, f.Path, errs[0].ContextMap()["path"])
	require.Contains(t, errs[0].ContextMap()["error"], "no space left on device")

	faults.Set(nil)
	require.Eventually(t, func() bool { return fence.Err() == nil }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskFull)))
	require.NoError(t, s.Apply(entry(2)))
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("takes writes again").Len() == 1 }, 10*time.Second, 10*time.Millisecond)

	// Another kind of failure is a disk_error.
	faults.Set(syscall.EIO)
	require.ErrorIs(t, s.Apply(entry(3)), syscall.EIO)
	require.Equal(t, models.DiskError, fence.Fault().Kind)
	require.Equal(t, 1.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskError)))
	faults.Set(nil)
	require.Eventually(t, func() bool { return fence.Err() == nil }, 10*time.Second, 10*time.Millisecond)
}

// TestDiskFenceFencesOnAFailedFlush: a shard's background flush failing for
// lack of space (the log still takes writes) fences the node as a failed log
// does — one ERROR naming the shard and the file, a disk_full fault, 507,
// the gauge — and the fence lifts by itself at the flusher's first success
// once space is back. A flush refused for what it holds (not the disk's
// fault) does not fence.
func TestDiskFenceFencesOnAFailedFlush(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	fence := NewDiskFence(zap.New(core), reg)
	faults := &engine.Faults{}
	eng, err := engine.NewBoltEngine(t.TempDir(), engine.WithFaults(faults), engine.WithLogReport(fence.Report),
		engine.WithFlushReport(fence.ReportFlush), engine.WithFlushInterval(20*time.Millisecond))
	require.NoError(t, err)
	defer eng.Close()
	s, err := eng.Open("db", 3)
	require.NoError(t, err)
	entry := func(txn uint64) engine.Entry {
		return engine.Entry{TxnID: txn, Term: 1, Points: []lineproto.Point{{Metric: "m", Field: "value", TS: int64(txn), Value: 1.0}}}
	}

	faults.SetFlush(syscall.ENOSPC)
	require.NoError(t, s.Apply(entry(1)), "the log takes the write; its flush fails later")
	require.Eventually(t, func() bool { return fence.Err() != nil }, 10*time.Second, 5*time.Millisecond)
	f := fence.Fault()
	require.Equal(t, models.DiskFull, f.Kind)
	require.Contains(t, f.Path, "db")
	require.ErrorIs(t, fence.Err(), models.ErrInsufficientStorage)
	require.Equal(t, 1.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskFull)))
	// The flusher retries every tick; the ERROR is logged once.
	require.Eventually(t, func() bool { return len(logs.FilterMessageSnippet("shard flush failed").All()) >= 1 }, 5*time.Second, 5*time.Millisecond)
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	require.Len(t, errs, 1)
	require.Equal(t, int64(3), errs[0].ContextMap()["shard"])

	faults.SetFlush(nil)
	require.Eventually(t, func() bool { return fence.Err() == nil }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 0.0, testutil.ToFloat64(fence.gauge.WithLabelValues(models.DiskFull)))
	require.Len(t, logs.FilterMessageSnippet("shard files take writes again").All(), 1)
	require.NoError(t, s.Apply(entry(2)))

	// Not the disk's fault: FlushFailures' business, no fence.
	fence.ReportFlush("db", 4, errors.New("engine: flush up to txn 9: key too large"))
	require.NoError(t, fence.Err())
	// The log's failure and a flush's together: the fence lifts only when
	// both are healed.
	fence.ReportFlush("db", 5, &os.PathError{Op: "write", Path: "db/5", Err: syscall.EIO})
	fence.Report(&os.PathError{Op: "write", Path: "x.wal", Err: syscall.ENOSPC})
	require.Equal(t, models.DiskFull, fence.Fault().Kind, "the log's fault is shown first")
	fence.ReportFlush("db", 5, nil)
	require.Error(t, fence.Err(), "the log is still failed")
}
