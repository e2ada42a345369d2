package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// spareReady waits for the segment made ahead of e's log and returns its
// seq.
func spareReady(t *testing.T, e Engine) uint64 {
	t.Helper()
	w := walOf(e)
	var seq uint64
	require.Eventually(t, func() bool {
		w.spareMu.Lock()
		defer w.spareMu.Unlock()
		if w.spare == nil {
			return false
		}
		seq = w.spare.seq
		return true
	}, 10*time.Second, time.Millisecond)
	return seq
}

func segFileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// isZeros says whether b holds zeros only.
func isZeros(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// activeSeg is the seq and used size of e's active segment.
func activeSeg(e Engine) (uint64, int64) {
	w := walOf(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.segs[len(w.segs)-1]
	return a.seq, a.size
}

// TestRollOverWritesIntoTheSegmentMadeAhead: the segment after the active
// one is made ahead, full size and zeros, under a name no release reads as
// a segment; a roll-over takes it (renamed), the records are written into
// it without growing the file, and the next one is made ahead again. The
// segment a roll-over leaves is cut to where its records end: a segment
// before the last that ends in zeros is corruption to the previous release
// (and to this one), which a node rolled back must open. A reopen reads
// every record back and cuts the last segment's zeros, and the spare is
// gone after a close.
func TestRollOverWritesIntoTheSegmentMadeAhead(t *testing.T) {
	const segBytes = 4096
	dir := t.TempDir()
	logDir := filepath.Join(dir, walDirName)
	opts := append([]Option{withSegmentBytes(segBytes)}, manual...)
	e, s := openShardAt(t, dir, opts...)
	first := spareReady(t, e)
	require.EqualValues(t, 2, first, "made ahead at open, after segment 1")
	spare := filepath.Join(logDir, spareName(first))
	require.EqualValues(t, segBytes, segFileSize(t, spare))
	b, err := os.ReadFile(spare)
	require.NoError(t, err)
	require.True(t, isZeros(b), "a spare is zeros")
	require.NoFileExists(t, filepath.Join(logDir, segName(first)), "not a segment before it is taken")

	// writeUntil writes until segment seq is the active one.
	writeUntil := func(seq uint64) {
		for i := 0; ; i++ {
			if active, _ := activeSeg(e); active == seq {
				return
			}
			require.Less(t, i, 1000, "no roll-over")
			apply(t, s, 1, pt("m", "h=a", "value", int64(s.LastTxnID()+1), float64(i)), pt("m", "h=b", "value", int64(s.LastTxnID()+1), 1))
		}
	}
	writeUntil(first)
	path := filepath.Join(logDir, segName(first))
	require.NoFileExists(t, spare, "taken: renamed")
	_, size := activeSeg(e)
	require.Less(t, size, int64(segBytes))
	require.EqualValues(t, segBytes, segFileSize(t, path), "records go into the made blocks: the file does not grow")
	require.Equal(t, first+1, spareReady(t, e), "the next one is made ahead once the spare is taken")

	writeUntil(first + 1)
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Less(t, len(b), segBytes, "the segment left is cut to its records")
	require.NotZero(t, b[len(b)-1], "it ends in its last record, not in zeros")
	want, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	des, err := os.ReadDir(logDir)
	require.NoError(t, err)
	for _, de := range des {
		require.False(t, strings.HasSuffix(de.Name(), spareSuffix), "the spare is removed at close: %s", de.Name())
	}
	last := filepath.Join(logDir, segName(first+1))
	require.EqualValues(t, segBytes, segFileSize(t, last), "the last segment ends in its zeros")

	e, s = openShardAt(t, dir, opts...)
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Less(t, segFileSize(t, last), int64(segBytes), "its zeros cut at open")
	apply(t, s, 1, pt("m", "h=a", "value", 1<<40, 1))
	require.NoError(t, e.Close())

	// Zeros after the records of a segment before the last (what the
	// previous release refuses) are corruption, not an end.
	require.NoError(t, os.WriteFile(path, append(b, make([]byte, 512)...), 0o600))
	_, err = NewBoltEngine(dir, opts...)
	require.ErrorIs(t, err, ErrWALCorrupt)
	require.ErrorContains(t, err, path)
}

// TestCrashWithASpareAndATornTail: a crash leaves the spare beside the
// active segment, which may end in a record the crash tore followed by the
// zeros made ahead. The active segment is still the last one (the spare is
// not a segment): its tail is cut, the spare removed, and the log opens
// with every record written before.
func TestCrashWithASpareAndATornTail(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, walDirName)
	opts := append([]Option{withSegmentBytes(1 << 20)}, manual...)
	e, s := openShardAt(t, dir, opts...)
	apply(t, s, 1, pt("m", "h=a", "value", 1, 1), pt("m", "h=b", "value", 2, 2))
	want, err := s.Entries(0, 0)
	require.NoError(t, err)
	seq := spareReady(t, e)
	require.NoError(t, e.Close())

	active := filepath.Join(logDir, segName(seq-1))
	b, err := os.ReadFile(active)
	require.NoError(t, err)
	torn := append(append(b, 200, 0, 0, 0, 9, 9, 9, 9, 1, 2, 3), make([]byte, 4096)...)
	require.NoError(t, os.WriteFile(active, torn, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(logDir, spareName(seq)), make([]byte, 4096), 0o600))

	e, s = openShardAt(t, dir, opts...)
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.EqualValues(t, len(b), segFileSize(t, active), "the torn record and the zeros cut")
	apply(t, s, 1, pt("m", "h=a", "value", 3, 3))
	require.NoError(t, e.Close())
}

// TestSpareIsNotMadeForAClosedLog: a spare made after the log closed would
// be a file no one removes; close waits for one under way and removes it.
func TestSpareIsNotMadeForAClosedLog(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir, withSegmentBytes(1<<20))
	seq := spareReady(t, e)
	require.NoError(t, e.Close())
	w := walOf(e)
	w.prepareSpare(seq) // as a late worker would
	require.Nil(t, w.spare)
	require.NoFileExists(t, filepath.Join(dir, walDirName, spareName(seq)))
}
