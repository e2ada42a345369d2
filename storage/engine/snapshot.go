package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	bolt "go.etcd.io/bbolt"
)

// A snapshot is the shard file and its log:
//
//	"CAIRNSNP" | u64 BE file size | file | u64 BE base | u64 BE base term |
//	u64 BE n | n x (u32 LE length | u32 LE CRC-32C | encoded entry base+i) |
//	[u64 BE m | m x (u64 BE file id | u64 BE size | sealed partition file)]
//
// The sealed partitions (partition.go) come only with a file of format
// PartFormat or newer, which a peer of an older protocol is never sent.
//
// Restore also takes the snapshots of the previous format, a bare bbolt file
// with its log inside.

var snapshotMagic = []byte("CAIRNSNP")

// maxSnapshotEntries bounds the log a snapshot may carry (a shard keeps
// WithRetainEntries of them plus its unflushed tail).
const maxSnapshotEntries = 1 << 22

// Snapshot copies the file as of one read transaction, then the log from
// its start; the transaction and the log are taken under wmu and fmu (no
// flush moves flushed_txn or the log start between the two), so they agree.
// It needs no flush: the memtables are derived from the log tail past
// flushed_txn, which the copy carries, and Restore replays it.
func (s *boltShard) Snapshot(w io.Writer) error { return s.SnapshotUpTo(w, math.MaxUint64) }

// ErrFormatTooNew: a snapshot was asked for by a peer that cannot read the
// shard file's format.
var ErrFormatTooNew = errors.New("shard file format too new for the peer")

// SnapshotUpTo is Snapshot for a peer that reads shard files up to format
// maxFormat: a file marked newer is refused (ErrFormatTooNew), checked in
// the snapshot's own transaction, so a flush that writes the first pack
// meanwhile cannot slip one through. A 0.1.0 follower checks no format and
// would restore a format-3 file without seeing its packs.
func (s *boltShard) SnapshotUpTo(w io.Writer, maxFormat uint64) error {
	s.wmu.Lock()
	s.fmu.Lock()
	unlock := func() {
		s.fmu.Unlock()
		s.wmu.Unlock()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		unlock()
		return ErrClosed
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		unlock()
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if f := fileFormat(tx); f > maxFormat {
		unlock()
		return fmt.Errorf("%w: %s/%d is format %d, the peer reads format %d and older: upgrade the peer",
			ErrFormatTooNew, s.id.db, s.id.shard, f, maxFormat)
	}
	s.lmu.RLock()
	base, baseTerm := s.idx.base, s.idx.baseTerm
	s.lmu.RUnlock()
	entries, err := s.readLog(base, s.LastTxnID(), 0)
	unlock()
	if err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	hdr := append(append([]byte(nil), snapshotMagic...), u64Key(uint64(tx.Size()))...)
	if _, err := bw.Write(hdr); err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	if _, err := tx.WriteTo(bw); err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	b := binary.BigEndian.AppendUint64(nil, base)
	b = binary.BigEndian.AppendUint64(b, baseTerm)
	b = binary.BigEndian.AppendUint64(b, uint64(len(entries)))
	for _, e := range entries {
		start := len(b)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
		b = e.appendBinary(b)
		binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-8))
		binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+8:], crcTable))
		if len(b) > 1<<20 {
			if _, err := bw.Write(b); err != nil {
				return fmt.Errorf("engine: snapshot: %w", err)
			}
			b = b[:0]
		}
	}
	if _, err := bw.Write(b); err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	if fileFormat(tx) >= PartFormat {
		if err := writeParts(bw, tx); err != nil {
			return fmt.Errorf("engine: snapshot: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	return nil
}

// snapshotLog is the log a snapshot carries: entries (base, base+len].
type snapshotLog struct {
	base, baseTerm uint64
	entries        []Entry
	parts          map[uint64]string // the partition files it carried, by id, staged
}

// readSnapshot writes the snapshot's file to path, synced, and returns its
// log. A snapshot of the previous format is a bare bbolt file whose log is
// read from it (legacy true).
func readSnapshot(r io.Reader, path string) (l snapshotLog, legacy bool, err error) {
	br := bufio.NewReaderSize(r, 1<<16)
	head, err := br.Peek(len(snapshotMagic) + 8)
	if err != nil || !bytes.Equal(head[:len(snapshotMagic)], snapshotMagic) {
		// The previous format, or garbage that checkSnapshot refuses.
		return l, true, writeFileSync(path, br)
	}
	size := binary.BigEndian.Uint64(head[len(snapshotMagic):])
	if _, err := br.Discard(len(head)); err != nil {
		return l, false, err
	}
	if err := writeFileSync(path, io.LimitReader(br, int64(min(size, 1<<62)))); err != nil {
		return l, false, err
	}
	if fi, err := os.Stat(path); err != nil || uint64(fi.Size()) != size {
		return l, false, fmt.Errorf("%w: shard file cut short", ErrBadSnapshot)
	}
	var hdr [24]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return l, false, fmt.Errorf("%w: log header: %v", ErrBadSnapshot, err)
	}
	l.base, l.baseTerm = binary.BigEndian.Uint64(hdr[:]), binary.BigEndian.Uint64(hdr[8:])
	n := binary.BigEndian.Uint64(hdr[16:])
	if n > maxSnapshotEntries {
		return l, false, fmt.Errorf("%w: %d log entries, at most %d", ErrBadSnapshot, n, maxSnapshotEntries)
	}
	term := l.baseTerm
	for i := range n {
		var rh [8]byte
		if _, err := io.ReadFull(br, rh[:]); err != nil {
			return l, false, fmt.Errorf("%w: log entry %d: %v", ErrBadSnapshot, i, err)
		}
		size := binary.LittleEndian.Uint32(rh[:])
		if size > maxRecordBytes {
			return l, false, fmt.Errorf("%w: log entry %d of %d bytes", ErrBadSnapshot, i, size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(br, buf); err != nil {
			return l, false, fmt.Errorf("%w: log entry %d: %v", ErrBadSnapshot, i, err)
		}
		var e Entry
		if crc32.Checksum(buf, crcTable) != binary.LittleEndian.Uint32(rh[4:]) {
			return l, false, fmt.Errorf("%w: log entry %d fails its checksum", ErrBadSnapshot, i)
		}
		if err := e.UnmarshalBinary(buf); err != nil {
			return l, false, fmt.Errorf("%w: log entry %d: %v", ErrBadSnapshot, i, err)
		}
		if e.TxnID != l.base+i+1 || e.Term < term {
			return l, false, fmt.Errorf("%w: log entry %d is txn %d term %d", ErrBadSnapshot, i, e.TxnID, e.Term)
		}
		term = e.Term
		l.entries = append(l.entries, e)
	}
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		return l, false, nil
	}
	l.parts, err = readPartFiles(br, path)
	return l, false, err
}

// prepareSnapshot checks that the staged file at path opens as a shard whose
// unflushed tail the log holds, moves a previous format's log out of it, and
// gives it incarnation inc. It returns the log to write under inc.
func prepareSnapshot(path string, l snapshotLog, legacy bool, inc uint64) (snapshotLog, error) {
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		return l, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		// Snapshots of older versions have no block buckets; opening adds
		// them and converts the points.
		for _, name := range [][]byte{bucketMeta, bucketLog, bucketUndo} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: bucket %q missing", ErrBadSnapshot, name)
			}
		}
		if err := checkFormat(tx, "the snapshot"); err != nil {
			return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
		}
		m, err := readMeta(tx)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		if _, err := loadIndex(tx); err != nil {
			return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		if err := checkStagedParts(tx, l.parts); err != nil {
			return err
		}
		if legacy {
			es, err := legacyLog(tx, m)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
			}
			l = snapshotLog{base: m.baseTxn, baseTerm: m.baseTerm, entries: es}
		}
		last := l.base + uint64(len(l.entries))
		if m.flushedTxn < l.base || m.flushedTxn > last || m.baseTxn > l.base {
			return fmt.Errorf("%w: log (%d, %d] does not hold the unflushed tail after %d", ErrBadSnapshot, l.base, last, m.flushedTxn)
		}
		return clearLegacyLog(tx, m, inc, termOf(m.flushedTxn, l.base, l.baseTerm, l.entries))
	})
	return l, err
}

// Restore stages the snapshot's file next to the shard file and checks it,
// writes the snapshot's log to the write-ahead log under a new incarnation,
// then swaps the file in with a rename: a crash leaves the old file (and the
// new records, which no file claims) or the new one and its log, never a mix.
func (s *boltShard) Restore(r io.Reader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.closed() {
		return ErrClosed
	}
	tmp := s.path + ".restore"
	defer os.Remove(tmp)
	defer func() { _ = removePartFiles(tmp) }() // the staged partitions not installed

	l, legacy, err := readSnapshot(r, tmp)
	if err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	inc := newIncarnation()
	if l, err = prepareSnapshot(tmp, l, legacy, inc); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	s.wal.register(inc, s.id) // its records stay until the swap, or go if it fails
	var recs []walRec
	if len(l.entries) > 0 {
		data, rr := encodeEntries(s.id, inc, l.baseTerm, l.entries)
		if recs, err = s.wal.append(data, rr); err != nil {
			s.wal.unregister(inc)
			return fmt.Errorf("engine: restore: %w", err)
		}
	} else {
		// The log starts at base: a cut there records its term.
		rec := walRec{kind: recTruncate, inc: inc, db: s.id.db, shard: s.id.shard, txn: l.base, term: l.baseTerm}
		data, _ := appendRecord(nil, rec, nil)
		if recs, err = s.wal.append(data, []walRec{rec}); err != nil {
			s.wal.unregister(inc)
			return fmt.Errorf("engine: restore: %w", err)
		}
	}
	if err := s.installParts(l.parts); err != nil {
		s.wal.unregister(inc)
		return fmt.Errorf("engine: restore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.replaceFile(tmp, "restore"); err != nil {
		s.wal.unregister(inc)
		return err
	}
	s.touched(math.MinInt64)
	// The snapshot's unflushed tail is in its log: replay it into a new memtable.
	err = s.recover(recs)
	s.resyncQueueLocked(fmt.Errorf("%w: shard restored from a snapshot", ErrTxnGap))
	return err
}

func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
