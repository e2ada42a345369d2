package engine

import (
	"fmt"
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
// The made-ahead file is named <segment>.spare, which no release reads as
// a segment (they list *.wal only), until a roll-over takes it: the segment
// it leaves is first cut to where its records end and synced, then the
// spare is renamed to its segment name and the directory synced. So every
// segment before the last one ends where its records do, as the releases
// before this one require of them (a zero tail there is corruption to
// them), and only the last one may end in zeros, which every release cuts
// at open like a torn tail. A spare left by a crash is removed at open.

// spareSuffix ends the name of a segment made ahead and not yet taken.
const spareSuffix = ".wal.spare"

func spareName(seq uint64) string { return segName(seq) + ".spare" }

// nextSegment makes segment seq the active one: the spare made ahead when
// it is that one, else a new empty file. The caller holds wrMu, or has the
// log to itself.
func (w *wal) nextSegment(seq uint64) (*segment, error) {
	if err := w.cutActive(); err != nil {
		return nil, err
	}
	w.spareMu.Lock() // a spare under way is ready soon: its zeros are written already, or being synced
	seg := w.spare
	w.spare = nil
	if seg != nil && seg.seq != seq {
		w.discardSpare(seg)
		seg = nil
	}
	w.spareMu.Unlock()
	if seg != nil {
		if err := w.takeSpare(seg); err != nil {
			_ = seg.f.Close()
			_ = os.Remove(seg.path)
			seg = nil
		}
	}
	if seg == nil {
		var err error
		if seg, err = w.newSegment(seq); err != nil {
			return nil, err
		}
	} else {
		w.mu.Lock()
		w.segs = append(w.segs, seg)
		w.mu.Unlock()
	}
	w.prepareSpareAfter(seq)
	return seg, nil
}

// cutActive cuts the zeros off the active segment when it was made ahead,
// and syncs it, before a roll-over leaves it. The caller holds wrMu.
func (w *wal) cutActive() error {
	w.mu.Lock()
	seg := w.segs[len(w.segs)-1]
	size := seg.size
	w.mu.Unlock()
	if seg.alloc <= size {
		return nil
	}
	if err := seg.f.Truncate(size); err != nil {
		return fmt.Errorf("engine: cut the unused end of %s: %w", seg.path, err)
	}
	if err := fdatasync(seg.f); err != nil {
		return fmt.Errorf("sync %s: %w", seg.path, err)
	}
	seg.alloc = 0
	return nil
}

// takeSpare renames the spare to its segment's name and syncs the
// directory: from then on it is the last segment.
func (w *wal) takeSpare(seg *segment) error {
	path := filepath.Join(w.dir, segName(seg.seq))
	if err := os.Rename(seg.path, path); err != nil {
		return err
	}
	seg.path = path
	if err := syncDir(w.dir); err != nil {
		return err
	}
	seg.alloc = w.segBytes
	return nil
}

// prepareSpareAfter has the segment after seq made ahead, beside the
// writes.
func (w *wal) prepareSpareAfter(seq uint64) {
	if w.segBytes <= 0 {
		return
	}
	workers.Go(func() { w.prepareSpare(seq + 1) })
}

// prepareSpare writes segment seq's spare full of zeros, syncs it, and
// keeps it, unless the log is closed or seq is
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
	path := filepath.Join(w.dir, spareName(seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	seg := &segment{seq: seq, path: path, f: f, holders: make(map[uint64]holder)}
	if err := zeroFill(f, w.segBytes); err != nil {
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
