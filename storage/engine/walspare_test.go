package engine

import (
	"os"
	"path/filepath"
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

// TestRollOverWritesIntoTheSegmentMadeAhead: the segment after the active
// one is made ahead, full size and zeros; a roll-over takes it, the records
// are written into it without growing the file, and the next one is made
// ahead again. A reopen reads every record back past the zeros the
// segments before the last end in, and the spare is gone after a close.
func TestRollOverWritesIntoTheSegmentMadeAhead(t *testing.T) {
	const segBytes = 4096
	dir := t.TempDir()
	opts := append([]Option{withSegmentBytes(segBytes)}, manual...)
	e, s := openShardAt(t, dir, opts...)
	w := walOf(e)
	first := spareReady(t, e)
	require.EqualValues(t, 2, first, "made ahead at open, after segment 1")
	path := filepath.Join(dir, walDirName, segName(first))
	require.EqualValues(t, segBytes, segFileSize(t, path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, zeroTail(b), "a spare is zeros")

	for i := 0; ; i++ {
		apply(t, s, 1, pt("m", "h=a", "value", int64(i), float64(i)), pt("m", "h=b", "value", int64(i), 1))
		w.mu.Lock()
		active := w.segs[len(w.segs)-1]
		seq, size := active.seq, active.size
		w.mu.Unlock()
		if seq == first {
			require.Less(t, size, int64(segBytes))
			require.EqualValues(t, segBytes, segFileSize(t, path), "records go into the made blocks: the file does not grow")
			break
		}
		require.Less(t, i, 1000, "no roll-over")
	}
	require.Equal(t, first+1, spareReady(t, e), "the next one is made ahead once the spare is taken")
	// Fill the spare's successor too, so a segment ending in zeros is
	// before the last one at the reopen.
	for {
		w.mu.Lock()
		seq := w.segs[len(w.segs)-1].seq
		w.mu.Unlock()
		if seq > first {
			break
		}
		apply(t, s, 1, pt("m", "h=a", "value", int64(s.LastTxnID()+1000), 1))
	}
	want, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	for _, p := range segments(t, dir) {
		require.LessOrEqual(t, p, filepath.Join(dir, walDirName, segName(first+1)), "the spare is removed at close")
	}
	tail, err := os.ReadFile(path)
	require.NoError(t, err)
	require.EqualValues(t, 0, tail[len(tail)-1], "segment %d ends in zeros", first)

	e, s = openShardAt(t, dir, opts...)
	got, err := s.Entries(0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	apply(t, s, 1, pt("m", "h=a", "value", 1<<40, 1))
	require.NoError(t, e.Close())

	// A byte that is not zero in that tail is corruption, not an end.
	tail[len(tail)-1] = 1
	require.NoError(t, os.WriteFile(path, tail, 0o600))
	_, err = NewBoltEngine(dir, opts...)
	require.ErrorIs(t, err, ErrWALCorrupt)
	require.ErrorContains(t, err, path)
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
	require.NoFileExists(t, filepath.Join(dir, walDirName, segName(seq)))
}
