package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// maxSnapshotParts bounds the sealed partition files a snapshot may carry,
// and maxPartBytes each one's size.
const (
	maxSnapshotParts = 1 << 16
	maxPartBytes     = 1 << 40
)

// writeParts writes the sealed partition files tx records, after a
// snapshot's log. The caller holds mu shared: none is removed meanwhile,
// and a sealed file is never written again.
func writeParts(w io.Writer, tx *bolt.Tx) error {
	recs, err := readParts(tx)
	if err != nil {
		return err
	}
	set := partsOf(tx)
	if _, err := w.Write(u64Key(uint64(len(recs)))); err != nil {
		return err
	}
	for _, r := range recs {
		var p *partition
		if set != nil {
			p = set.get(r.fileID)
		}
		if p == nil {
			return fmt.Errorf("%w: sealed partition %s is not open", ErrCorrupt, partPath(tx.DB().Path(), r.fileID))
		}
		if err := copyPart(w, p.path, r); err != nil {
			return err
		}
	}
	return nil
}

func copyPart(w io.Writer, path string, r partRec) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := binary.BigEndian.AppendUint64(u64Key(r.fileID), uint64(r.size))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err = io.CopyN(w, f, r.size)
	return err
}

// readPartFiles stages the sealed partition files after a snapshot's log
// next to the staged shard file path (as its partitions), and returns them
// by id; prepareSnapshot checks them against the file's records.
func readPartFiles(r io.Reader, path string) (map[uint64]string, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:8]); err != nil {
		return nil, fmt.Errorf("%w: partitions header: %v", ErrBadSnapshot, err)
	}
	n := beUint64(hdr[:8])
	if n > maxSnapshotParts {
		return nil, fmt.Errorf("%w: %d sealed partitions, at most %d", ErrBadSnapshot, n, maxSnapshotParts)
	}
	out := make(map[uint64]string, n)
	for i := range n {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return out, fmt.Errorf("%w: sealed partition %d: %v", ErrBadSnapshot, i, err)
		}
		id, size := beUint64(hdr[:8]), beUint64(hdr[8:])
		if _, dup := out[id]; id == 0 || dup || size == 0 || size > maxPartBytes {
			return out, fmt.Errorf("%w: sealed partition %d: file %x of %d bytes", ErrBadSnapshot, i, id, size)
		}
		dst := partPath(path, id)
		out[id] = dst
		if err := writeFileSync(dst, io.LimitReader(r, int64(size))); err != nil {
			return out, err
		}
		if fi, err := os.Stat(dst); err != nil || uint64(fi.Size()) != size {
			return out, fmt.Errorf("%w: sealed partition %x cut short", ErrBadSnapshot, id)
		}
	}
	if _, err := r.Read(hdr[:1]); !errors.Is(err, io.EOF) {
		return out, fmt.Errorf("%w: data after the sealed partitions", ErrBadSnapshot)
	}
	return out, nil
}

// checkStagedParts checks that the staged partition files are exactly
// those the staged shard file records, each whole.
func checkStagedParts(tx *bolt.Tx, staged map[uint64]string) error {
	recs, err := readParts(tx)
	if err != nil {
		return err
	}
	if len(recs) != len(staged) {
		return fmt.Errorf("%w: %d sealed partitions recorded, %d carried", ErrBadSnapshot, len(recs), len(staged))
	}
	for _, r := range recs {
		path, ok := staged[r.fileID]
		if !ok {
			return fmt.Errorf("%w: sealed partition %x not carried", ErrBadSnapshot, r.fileID)
		}
		db, err := openPartFile(path, r)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
		}
		if err := db.Close(); err != nil {
			return err
		}
	}
	return nil
}

// installParts moves the staged partition files of a restore to their
// names next to the shard file, before the shard file itself is swapped in:
// until then no record names them (a crash leaves them to the cleanup at
// open). A file the shard holds already under the same id is the same
// sealed file (ids are random, files never rewritten): it stays.
func (s *boltShard) installParts(staged map[uint64]string) error {
	v, _ := partSets.Load(s.path)
	set, _ := v.(*partSet)
	for id, path := range staged {
		if set != nil && set.get(id) != nil {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		if err := os.Rename(path, partPath(s.path, id)); err != nil {
			return err
		}
	}
	return syncDir(filepath.Dir(s.path))
}
