package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Sealed time partitions (seal.go writes them): a shard's flushed points of
// a time range [start, end) that is well in the past move out of the shard
// file into a file of their own next to it, <shard file>.p<16 hex digits>,
// a bbolt file holding one blocks bucket keyed as the shard file's (id |
// min ts), read-only once written. The series index, postings, string heap,
// field types and rollup cells stay in the shard file, whose parts bucket
// records each sealed partition:
//
//	parts  ts(start) -> end | file id | size | blocks | min ts | max ts (8 bytes each, BE)
//
// Readers merge the shard file's blocks and packs over the sealed files
// whose range overlaps theirs (the shard file wins on the same ts: a late
// write lands there, after the seal), so a query outside a partition never
// opens it; expiry drops a partition by removing its record, then its file
// (expire.go). A file is opened when its record is loaded (at open) or
// written (by the seal, before the commit that records it), and closed and
// removed only with mu held exclusively, after the commit that removed its
// record: readers hold mu shared for their whole transaction, so none is
// left reading a file that goes.
var bucketParts = []byte("parts")

const partRecBytes = 48

// partRec is a sealed partition's record.
type partRec struct {
	start, end   int64 // the range it holds: [start, end)
	fileID       uint64
	size         int64 // the file's size, checked at open
	blocks       int64
	minTS, maxTS int64 // its oldest and newest point
}

func encodePart(r partRec) []byte {
	b := make([]byte, 0, partRecBytes)
	for _, v := range []uint64{uint64(r.end), r.fileID, uint64(r.size), uint64(r.blocks), uint64(r.minTS), uint64(r.maxTS)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// decodePart parses and checks a record: a shard file is input like any
// other, and a record that names a range or file it cannot hold is refused.
func decodePart(k, v []byte) (partRec, error) {
	if len(k) != 8 || len(v) != partRecBytes {
		return partRec{}, fmt.Errorf("%w: partition record %x of %d bytes", ErrCorrupt, k, len(v))
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(v[8*i:]) }
	r := partRec{start: tsFromKey(k), end: int64(u(0)), fileID: u(1), size: int64(u(2)), blocks: int64(u(3)),
		minTS: int64(u(4)), maxTS: int64(u(5))}
	if r.end <= r.start || r.fileID == 0 || r.size <= 0 || r.blocks <= 0 || r.minTS < r.start || r.maxTS >= r.end || r.minTS > r.maxTS {
		return partRec{}, fmt.Errorf("%w: partition record %+v", ErrCorrupt, r)
	}
	return r, nil
}

// tsKey is a parts bucket key: a partition's start.
func tsKey(ts int64) []byte {
	k := make([]byte, 8)
	putTSKey(k, ts)
	return k
}

// readParts lists the sealed partitions the transaction records, by start.
func readParts(tx *bolt.Tx) ([]partRec, error) {
	b := tx.Bucket(bucketParts)
	if b == nil {
		return nil, nil
	}
	var out []partRec
	err := b.ForEach(func(k, v []byte) error {
		r, err := decodePart(k, v)
		if err == nil && len(out) > 0 && out[len(out)-1].end > r.start {
			err = fmt.Errorf("%w: partitions %+v and %+v overlap", ErrCorrupt, out[len(out)-1], r)
		}
		out = append(out, r)
		return err
	})
	return out, err
}

// partPath is the file of the partition of file id next to shard file path.
func partPath(path string, id uint64) string { return fmt.Sprintf("%s.p%016x", path, id) }

// partFileID parses name as the file of a partition of shard file base
// (ok false: it is not one).
func partFileID(base, name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, base+".p")
	if !ok || len(rest) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 16, 64)
	return id, err == nil && id != 0
}

// partFiles lists the partition files next to shard file path, by id.
func partFiles(path string) (map[uint64]string, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]string)
	for _, e := range ents {
		if id, ok := partFileID(filepath.Base(path), e.Name()); ok {
			out[id] = filepath.Join(filepath.Dir(path), e.Name())
		}
	}
	return out, nil
}

// partition is an open sealed partition file.
type partition struct {
	rec  partRec
	path string
	db   *bolt.DB
}

// partSet is a shard's open partition files, by file id.
type partSet struct {
	mu   sync.Mutex
	open map[uint64]*partition
}

// partSets maps a shard file's path to its partition set, for code that
// holds a transaction of the file and not the shard.
var partSets sync.Map

func partsOf(tx *bolt.Tx) *partSet {
	if v, ok := partSets.Load(tx.DB().Path()); ok {
		return v.(*partSet)
	}
	return nil
}

func (ps *partSet) get(id uint64) *partition {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.open[id]
}

func (ps *partSet) add(p *partition) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.open[p.rec.fileID] = p
}

// take removes and returns the partitions of ids from the set.
func (ps *partSet) take(ids []uint64) []*partition {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*partition
	for _, id := range ids {
		if p := ps.open[id]; p != nil {
			out = append(out, p)
			delete(ps.open, id)
		}
	}
	return out
}

func openPartFile(path string, r partRec) (*bolt.DB, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: sealed partition [%d, %d): %v", ErrCorrupt, r.start, r.end, err)
	}
	if fi.Size() != r.size {
		return nil, fmt.Errorf("%w: sealed partition file %s is %d bytes, its record says %d", ErrCorrupt, path, fi.Size(), r.size)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: sealed partition file %s: %v", ErrCorrupt, path, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketBlocks) == nil {
			return fmt.Errorf("%w: sealed partition file %s has no blocks", ErrCorrupt, path)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// loadParts brings the shard's partition set in line with the records of
// its file: it opens the recorded files not open yet (a recorded file
// missing or unreadable is an error naming it), closes those no longer
// recorded, and removes the partition files next to the shard file that no
// record names (a seal or a restore a crash cut short). The caller has the
// shard to itself (opening, or mu held exclusively).
func (s *boltShard) loadParts() error {
	v, _ := partSets.LoadOrStore(s.path, &partSet{open: make(map[uint64]*partition)})
	set := v.(*partSet)
	var recs []partRec
	if err := s.db.View(func(tx *bolt.Tx) (err error) { recs, err = readParts(tx); return err }); err != nil {
		return fmt.Errorf("engine: open %s: %w", s.path, err)
	}
	files, err := partFiles(s.path)
	if err != nil {
		return fmt.Errorf("engine: open %s: %w", s.path, err)
	}
	keep := make(map[uint64]bool, len(recs))
	for _, r := range recs {
		keep[r.fileID] = true
		if set.get(r.fileID) != nil {
			continue
		}
		path := partPath(s.path, r.fileID)
		db, err := openPartFile(path, r)
		if err != nil {
			return fmt.Errorf("engine: open %s: %w", s.path, err)
		}
		set.add(&partition{rec: r, path: path, db: db})
	}
	var stale []uint64
	set.mu.Lock()
	for id := range set.open {
		if !keep[id] {
			stale = append(stale, id)
		}
	}
	set.mu.Unlock()
	var errs []error
	for _, p := range set.take(stale) {
		errs = append(errs, p.db.Close())
	}
	for id, path := range files {
		if !keep[id] {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// retireParts closes and removes the files of partitions whose records a
// committed transaction removed. It takes mu exclusively: no reader that
// saw the records is still reading them.
func (s *boltShard) retireParts(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	v, ok := partSets.Load(s.path)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, p := range v.(*partSet).take(ids) {
		errs = append(errs, p.db.Close())
		if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, syncDir(filepath.Dir(s.path)))
	return errors.Join(errs...)
}

// closeParts closes the shard's partition files (the shard is closing).
func closeParts(path string) error {
	v, ok := partSets.LoadAndDelete(path)
	if !ok {
		return nil
	}
	set := v.(*partSet)
	set.mu.Lock()
	defer set.mu.Unlock()
	var errs []error
	for id, p := range set.open {
		errs = append(errs, p.db.Close())
		delete(set.open, id)
	}
	return errors.Join(errs...)
}

// removePartFiles removes every partition file of shard file path (the
// shard is dropped).
func removePartFiles(path string) error {
	files, err := partFiles(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, p := range files {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sealedReads counts the sealed partitions reads opened (a read transaction
// of the file begun), so tests can check a read skips those outside its
// range.
var sealedReads atomic.Uint64

// SealedReads is how many sealed partition files this process's reads have
// opened.
func SealedReads() uint64 { return sealedReads.Load() }

// sealedView reads the sealed partitions that overlap a range, one read
// transaction of each, in time order.
type sealedView struct {
	parts []sealedPart
}

type sealedPart struct {
	rec    partRec
	tx     *bolt.Tx
	blocks *bolt.Bucket
}

// openSealed begins a read of the sealed partitions that tx records and
// that overlap [lo, hi]. Close it before tx ends.
func openSealed(tx *bolt.Tx, lo, hi int64) (sealedView, error) {
	recs, err := readParts(tx)
	if err != nil || len(recs) == 0 {
		return sealedView{}, err
	}
	set := partsOf(tx)
	var v sealedView
	for _, r := range recs {
		if r.end <= lo || r.start > hi {
			continue
		}
		var p *partition
		if set != nil {
			p = set.get(r.fileID)
		}
		if p == nil {
			v.close()
			return sealedView{}, fmt.Errorf("%w: sealed partition %s is not open", ErrCorrupt, partPath(tx.DB().Path(), r.fileID))
		}
		ptx, err := p.db.Begin(false)
		if err != nil {
			v.close()
			return sealedView{}, fmt.Errorf("sealed partition %s: %w", p.path, err)
		}
		sealedReads.Add(1)
		v.parts = append(v.parts, sealedPart{rec: r, tx: ptx, blocks: ptx.Bucket(bucketBlocks)})
	}
	return v, nil
}

// close ends the reads. A sealed file is never flushed or compacted, which
// is when the shard file's mapped pages are released (mapped.go): its
// pages a read touched are released here, or a node's resident memory
// would grow toward the size of every partition ever read.
func (v sealedView) close() {
	for _, p := range v.parts {
		_ = releaseMapped(p.tx.DB().Info().Data, uintptr(p.tx.Size()))
		_ = p.tx.Rollback()
	}
}

// under merges series id's sealed points in [start, end] under disk (the
// shard file's, sorted, which win on the same ts), with typ the type of
// disk's points (that of the sealed ones when disk is empty).
func (v sealedView) under(disk []memPoint, id uint64, start, end int64, typ models.FieldType) ([]memPoint, models.FieldType, error) {
	var sealed, scratch []memPoint
	stype, found := typ, false
	for _, p := range v.parts {
		if p.rec.end <= start || p.rec.start > end {
			continue
		}
		err := seriesBlocks(p.blocks, id, start, func(_, b []byte, h blockHeader) (bool, error) {
			if h.minTS > end {
				return false, nil
			}
			blockReads.Add(1)
			var err error
			if scratch, stype, err = decodeBlock(scratch[:0], b); err != nil {
				return false, err
			}
			found = true
			sealed = append(sealed, trimRange(scratch, h, start, end)...)
			return true, nil
		})
		if err != nil {
			return nil, typ, fmt.Errorf("sealed partition [%d, %d): %w", p.rec.start, p.rec.end, err)
		}
	}
	switch {
	case !found:
		return disk, typ, nil
	case len(disk) == 0:
		return sealed, stype, nil
	}
	return mergeMem(sealed, disk, func(int64, uint64) {}), typ, nil
}

// span widens first and last by series id's sealed blocks.
func (v sealedView) span(id uint64, widen func(lo, hi int64)) error {
	for _, p := range v.parts {
		c := p.blocks.Cursor()
		prefix := u64Key(id)
		first, _ := c.Seek(prefix)
		if first == nil || beUint64(first) != id {
			continue
		}
		last, _, err := lastBlockMax(p.blocks, id)
		if err != nil {
			return err
		}
		widen(tsFromKey(first[8:]), last)
	}
	return nil
}

// holds says whether one of the view's partitions holds points of series
// id.
func (v sealedView) holds(id uint64) (bool, error) {
	held := false
	err := v.span(id, func(int64, int64) { held = true })
	return held, err
}
