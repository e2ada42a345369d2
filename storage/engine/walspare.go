package engine

import (
	"bytes"
	"os"
	"path/filepath"
)

// Preallocated segments. A log append that grows its file changes the
// inode's size, so its fdatasync must wait for a commit of the file
// system's journal, which also writes out whatever else is pending on the
// disk (the shard files a flush just wrote, other processes' files, the
// discards of removed ones): with 32 senders on 2 cores a sync of 16 KiB
// took 0.3 ms at the median but over 15 ms for one in a hundred, up to
// 155 ms, and those slow syncs were 40 % of the log writer's time, each
// holding up every shard's commits (issue 21). An overwrite of blocks the
// file already has changes nothing its fdatasync must commit: the log
// writes into segments made ahead, their full size written with zeros and
// synced, so its syncs only write its own pages. The next segment is made
// beside the writes, once the previous one is taken into use; if it is not
// ready when needed, the roll-over makes a plain one as before.
//
// The unused rest of a segment is zeros. A segment before the last one may
// end in zeros (the roll-over left them; its size is what the records
// fill); the last one's zeros are cut like a torn tail at open.

// nextSegment makes segment seq the active one: the spare made ahead when
// it is that one, else a new empty file. The caller holds wrMu, or has the
// log to itself.
func (w *wal) nextSegment(seq uint64) (*segment, error) {
	w.spareMu.Lock() // a spare under way is ready soon: its zeros are written already, or being synced
	seg := w.spare
	w.spare = nil
	if seg != nil && seg.seq != seq {
		w.discardSpare(seg)
		seg = nil
	}
	if seg == nil {
		var err error
		seg, err = w.newSegment(seq)
		w.spareMu.Unlock()
		if err != nil {
			return nil, err
		}
	} else {
		w.spareMu.Unlock()
		w.mu.Lock()
		w.segs = append(w.segs, seg)
		w.mu.Unlock()
	}
	w.prepareSpareAfter(seq)
	return seg, nil
}

// prepareSpareAfter has the segment after seq made ahead, beside the
// writes.
func (w *wal) prepareSpareAfter(seq uint64) {
	if w.segBytes <= 0 {
		return
	}
	workers.Go(func() { w.prepareSpare(seq + 1) })
}

// prepareSpare writes segment seq full of zeros, syncs it and its
// directory, and keeps it as the spare, unless the log is closed or seq is
// not the one after the active segment any more (a roll-over made it
// meanwhile). A failure leaves no spare: the roll-over makes a plain
// segment and meets the error itself if the disk has one.
func (w *wal) prepareSpare(seq uint64) {
	w.spareMu.Lock()
	defer w.spareMu.Unlock()
	w.mu.Lock()
	skip := w.closed || w.spare != nil || w.segs[len(w.segs)-1].seq+1 != seq
	w.mu.Unlock()
	if skip {
		return
	}
	path := filepath.Join(w.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	seg := &segment{seq: seq, path: path, f: f, holders: make(map[uint64]holder)}
	if err := zeroFill(f, w.segBytes); err != nil {
		w.discardSpare(seg)
		return
	}
	if err := syncDir(w.dir); err != nil {
		w.discardSpare(seg)
		return
	}
	w.spare = seg
}

// zeroChunk is what zeroFill writes at a time.
var zeroChunk = make([]byte, 1<<20)

// zeroFill writes n bytes of zeros at the start of f and syncs them: the
// file's blocks are allocated and written, so later overwrites change no
// metadata an fdatasync must commit (a fallocate leaves the blocks
// unwritten, and their first write changes the extent tree).
func zeroFill(f *os.File, n int64) error {
	for off := int64(0); off < n; {
		b := zeroChunk[:min(int64(len(zeroChunk)), n-off)]
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return fdatasync(f)
}

// discardSpare closes and removes a spare segment never used; the caller
// holds spareMu.
func (w *wal) discardSpare(seg *segment) {
	_ = seg.f.Close()
	_ = os.Remove(seg.path)
}

// dropSpare discards the spare, waiting for one under way; for close and
// heal (which removes the file after the active segment).
func (w *wal) dropSpare() {
	w.spareMu.Lock()
	defer w.spareMu.Unlock()
	if w.spare != nil {
		w.discardSpare(w.spare)
		w.spare = nil
	}
}

// zeroTail says whether b is zeros only: the unused rest of a segment made
// ahead.
func zeroTail(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroChunk))
		if !bytes.Equal(b[:n], zeroChunk[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
