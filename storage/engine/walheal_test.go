package engine

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestLogFailureHealsWithoutRestart injects a full disk into the log's file
// layer: the commit under way fails with ErrLogFailed naming ENOSPC (and
// reported once), later commits fail at once without writing, healing fails
// while the disk is still full, and once it takes writes again HealLog cuts
// the half-written record and the shard goes on from the same txn. A reopen
// then finds every committed entry and no corruption.
func TestLogFailureHealsWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	faults := &Faults{}
	var mu sync.Mutex
	var reports []error
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	}
	e := newEngine(t, dir, append(manual, WithFaults(faults), WithLogReport(report))...)
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1))
	h := e.(LogHealer)
	require.NoError(t, h.LogFailure())
	require.NoError(t, h.HealLog(), "healing a working log is a no-op")
	size := walOf(e).walSize()

	faults.Set(syscall.ENOSPC)
	err = s.Apply(Entry{TxnID: 2, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 2, 2)}})
	require.ErrorIs(t, err, ErrLogFailed)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, h.LogFailure(), syscall.ENOSPC)
	require.EqualValues(t, 1, s.LastTxnID(), "a failed commit is not counted")
	err = s.Apply(Entry{TxnID: 2, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 2, 2)}})
	require.ErrorIs(t, err, ErrLogFailed, "a stopped log refuses at once")
	mu.Lock()
	require.Len(t, reports, 1, "one report per failure")
	mu.Unlock()

	err = h.HealLog()
	require.ErrorIs(t, err, syscall.ENOSPC, "the probe fails while the disk is full")
	require.Error(t, h.LogFailure())

	faults.Set(nil)
	require.NoError(t, h.HealLog())
	require.NoError(t, h.LogFailure())
	require.Equal(t, size, walOf(e).walSize())
	apply(t, s, 1, pt("m", "h=a", "value", 2, 2))
	apply(t, s, 1, pt("m", "h=a", "value", 3, 3))
	want, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Len(t, want, 3)
	require.NoError(t, e.Close())

	e = newEngine(t, dir, append(manual, WithFaults(faults), WithLogReport(report))...)
	s, err = e.Open("db1", 0)
	require.NoError(t, err)
	got, err := s.Entries(0, 0)
	require.NoError(t, err, "the half-written record was cut: no corruption")
	require.Equal(t, want, got)
	// A second failure, of another kind, is reported again.
	faults.Set(errors.New("input/output error"))
	err = s.Apply(Entry{TxnID: 4, Term: 1, Points: []lineproto.Point{pt("m", "h=a", "value", 4, 4)}})
	require.ErrorIs(t, err, ErrLogFailed)
	mu.Lock()
	require.Len(t, reports, 2)
	mu.Unlock()
	faults.Set(nil)
	require.NoError(t, e.(LogHealer).HealLog())
	apply(t, s, 1, pt("m", "h=a", "value", 4, 4))
}

// TestLogHealsAfterAFailedWriteToANewSegment: a write that started a new
// segment and failed in it leaves the log healable; the entries before and
// after it survive a reopen.
func TestLogHealsAfterAFailedWriteToANewSegment(t *testing.T) {
	dir := t.TempDir()
	faults := &Faults{}
	e := newEngine(t, dir, append(manual, WithFaults(faults), withSegmentBytes(1))...)
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	apply(t, s, 1, pt("m", "", "value", 1, 1))
	faults.Set(syscall.ENOSPC)
	err = s.Apply(Entry{TxnID: 2, Term: 1, Points: []lineproto.Point{pt("m", "", "value", 2, 2)}})
	require.ErrorIs(t, err, syscall.ENOSPC)
	faults.Set(nil)
	require.NoError(t, e.(LogHealer).HealLog())
	apply(t, s, 1, pt("m", "", "value", 2, 2))
	require.NoError(t, e.Close())
	e = newEngine(t, dir, manual...)
	s, err = e.Open("db1", 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.LastTxnID())
}
