package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Sealer is implemented by shards that seal time partitions (partition.go).
type Sealer interface {
	// SetPartitionLength sets the length of the shard's partitions; 0, the
	// value at open, seals none. The storage host sets it to the
	// database's (models.Database.PartitionLength, InfluxDB's shard group
	// duration) once every replica of the shard reads sealed partitions,
	// as AllowPacks.
	SetPartitionLength(d time.Duration)
	// Seal moves the flushed points of the partitions [start, start+len)
	// whose end is at least one length before now (unix ns), oldest
	// first, out of the shard file into files of their own, and returns
	// how many it sealed: at most sealMax a call, and no more once those
	// held sealCallWork, paced as compaction (sealBatch), so a backlog
	// is sealed over many calls.
	Seal(now int64) (int, error)
}

var _ Sealer = (*boltShard)(nil)

// PartFormat is the first shard format with sealed partitions: the shard
// file is marked with it by the first seal, and a peer of an older protocol
// (models.ProtocolPartitions) is sent no snapshot of such a shard.
const PartFormat = 4

// sealMax and sealCallWork bound one Seal call (the host's expiry pass of
// the node's other shards waits for it): no partition is begun once those
// sealed held sealCallWork (4M points: 8 s at the default compaction rate;
// see sealBatch).
// maxShardParts bounds the sealed partitions of a shard: past it, the rest
// stays in the shard file.
const (
	sealMax       = 16
	sealCallWork  = 64 << 20
	maxShardParts = 4096
)

func (s *boltShard) SetPartitionLength(d time.Duration) { s.partLen.Store(int64(d)) }

func (s *boltShard) Seal(now int64) (int, error) {
	l := s.partLen.Load()
	if l <= 0 {
		return 0, nil
	}
	if _, _, ok, err := s.sealCandidate(l, now); err != nil || !ok {
		return 0, err // nothing to seal: no commit either
	}
	// The last flush's blocks are checked first, as expiry does: a block
	// the log could still rebuild is not moved.
	if err := s.settleRecent(); err != nil {
		return 0, fmt.Errorf("engine: seal: %w", err)
	}
	n, err := s.sealSome(l, now)
	if n > 0 && err == nil && s.mostlyFree() {
		// The shard file keeps the recent points only: its space goes
		// back as after an expiry.
		err = s.rewriteFile()
	}
	return n, err
}

func (s *boltShard) sealSome(l, now int64) (int, error) {
	n, work := 0, int64(0)
	for n < sealMax && work < sealCallWork {
		start, end, ok, err := s.sealCandidate(l, now)
		if err != nil || !ok {
			return n, err
		}
		did, err := s.sealRange(start, end)
		if err != nil || did == 0 {
			return n, err
		}
		n, work = n+1, work+did
	}
	return n, nil
}

// sealCandidate is the range of the partition that holds the shard file's
// oldest point, if it ends one length before now or earlier: a sealed
// partition's own range when one holds that point (late writes join it),
// else [start, start+l) aligned on l and cut short by the partitions
// around it (sealed with another length before).
func (s *boltShard) sealCandidate(l, now int64) (start, end int64, ok bool, err error) {
	var oldest int64
	var found bool
	var recs []partRec
	err = s.view(func(tx *bolt.Tx) error {
		if oldest, found, err = fileOldest(tx); err != nil || !found {
			return err
		}
		recs, err = readParts(tx)
		return err
	})
	if err != nil || !found || oldest < math.MinInt64+2*l || oldest > math.MaxInt64-2*l {
		return 0, 0, false, err
	}
	start = oldest - ((oldest%l)+l)%l
	end = start + l
	for _, r := range recs {
		switch {
		case r.start <= oldest && oldest < r.end:
			start, end = r.start, r.end
		case r.end <= oldest:
			start = max(start, r.end)
		case r.start > oldest:
			end = min(end, r.start)
		}
	}
	return start, end, end <= now-l, nil
}

// sealed is what the first step of a seal wrote: the record, the series
// whose points it took from the shard file (with their type), and the
// partition of the same range it replaces (0: none).
type sealed struct {
	rec     partRec
	moved   []uint64
	types   []models.FieldType
	replace uint64
	work    int64 // booked by the copy's steps (sealBatch)
}

// sealRange seals [start, end) and returns the work its copy booked (see
// sealBatch; 0: it sealed nothing, the range is left for a later pass): the points of the range, the shard file's
// merged over those of a partition sealed before for it (late writes), go
// to a new file, written and synced first; then one transaction of the
// shard file takes them out of its blocks and packs and records the file.
// A crash between the two leaves a file no record names, removed at open.
// Flushes go on while the file is written (a seal of a large partition
// would stall writers otherwise); each one, and each rollback and restore,
// lowers sealWatch to the oldest ts it changed, and the second step, under
// the flush lock, gives the seal up if that is before end. The seal
// raises the undo floor (delete.go): the entries flushed before it are
// not rolled back one by one, since their points may be in the sealed file
// now.
func (s *boltShard) sealRange(start, end int64) (int64, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, ErrClosed
	}
	id := rand.Uint64() | 1
	path := partPath(s.path, id)
	s.sealWatch.Store(math.MaxInt64)
	w, ok, err := s.writePart(path, start, end)
	if err != nil || !ok {
		_ = os.Remove(path)
		return 0, err
	}
	if s.sealHook != nil {
		s.sealHook()
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.sealWatch.Load() < end {
		// A flush, delete, rollback or restore changed points before end
		// while the file was written: the next pass seals the range anew.
		_ = os.Remove(path)
		return 0, nil
	}
	w.rec.fileID = id
	db, err := openPartFile(path, w.rec)
	if err != nil {
		_ = os.Remove(path)
		return 0, fmt.Errorf("engine: seal: %w", err)
	}
	v, _ := partSets.Load(s.path)
	set := v.(*partSet)
	set.add(&partition{rec: w.rec, path: path, db: db})
	err = s.update(func(tx *bolt.Tx) error {
		rw := newBlockPut(tx, 0)
		for i, sid := range w.moved {
			err := rewriteRange(tx, rw, nil, sid, w.types[i], start, end-1, func(old []memPoint) []memPoint {
				return hideMem(old, [][2]int64{{start, end - 1}})
			})
			if err != nil {
				return fmt.Errorf("series %d: %w", sid, err)
			}
		}
		b, err := tx.CreateBucketIfNotExists(bucketParts)
		if err != nil {
			return err
		}
		if err := b.Put(tsKey(start), encodePart(w.rec)); err != nil {
			return err
		}
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		if err := raiseUndoFloor(tx, m.flushedTxn); err != nil {
			return err
		}
		return markFormat(tx, PartFormat)
	})
	if err != nil {
		for _, p := range set.take([]uint64{id}) {
			_ = p.db.Close()
		}
		_ = os.Remove(path)
		return 0, fmt.Errorf("engine: seal [%d, %d): %w", start, end, err)
	}
	s.dropMapped()
	if w.replace != 0 {
		return w.work, s.retireParts([]uint64{w.replace})
	}
	return w.work, nil
}

// A seal reads the range in steps, each one read transaction of the shard
// file (bbolt's mmap lock and the shard's read lock held) of at most
// sealBatch series and sealStepWork of work, and after each waits what the
// engine's compaction limiter asks for its work: pointWork bytes a point
// copied, its decoded size (the blocks written are often ten times
// smaller, and decoding and encoding the points is the cost on the cores).
// The seals and compactions of every shard of a node together go at most
// at the compaction rate (DefaultCompactRate, 8 MiB/s: 524k points/s of
// seals), so a node sealing a backlog of many shards leaves writes the
// rest of the disk and cores.
const (
	sealBatch    = 4096
	sealStepWork = 4 << 20
	pointWork    = 16
)

// writePart writes the points of [start, end) to a new partition file at
// path, synced, and says what it holds (ok false: nothing to seal now, the
// range holds the last flush's blocks or overlaps a partition of another
// length).
func (s *boltShard) writePart(path string, start, end int64) (w sealed, ok bool, err error) {
	dst, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true})
	if err != nil {
		return w, false, fmt.Errorf("engine: seal: %w", err)
	}
	w.rec = partRec{start: start, end: end, minTS: math.MaxInt64, maxTS: math.MinInt64}
	ok, err = s.copyRange(dst, start, end, &w)
	// bbolt grows a file to the next power of two: cut it to its pages,
	// as a copy of it (Tx.WriteTo) would be.
	var used int64
	if err == nil && ok {
		err = dst.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && ok {
		err = errors.Join(os.Truncate(path, used), syncFile(path), syncDir(filepath.Dir(path)))
	}
	if err != nil || !ok {
		return w, false, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return w, false, err
	}
	w.rec.size = fi.Size()
	return w, w.rec.blocks > 0, nil
}

// sealable says whether [start, end) can be sealed now, and notes the
// partition of the same range it would replace.
func sealable(tx *bolt.Tx, start, end int64, w *sealed) (bool, error) {
	recs, err := readParts(tx)
	if err != nil {
		return false, err
	}
	if len(recs) >= maxShardParts {
		return false, nil
	}
	for _, r := range recs {
		if r.start == start && r.end == end {
			w.replace = r.fileID
		} else if r.start < end && r.end > start {
			return false, nil // sealed with another length: left as it is
		}
	}
	c := tx.Bucket(bucketRecent).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) == 16 && tsFromKey(k[8:]) < end {
			return false, nil // a block of the last flush: after the next settle
		}
	}
	return true, nil
}

// copyRange copies every series' points of [start, end), the shard file's
// over those of the partition it replaces, into dst, in paced steps (see
// sealBatch); ok false: the range cannot be sealed now (sealable). A
// change to the range between two steps lowers sealWatch, and sealRange
// then gives the file up.
func (s *boltShard) copyRange(dst *bolt.DB, start, end int64, w *sealed) (ok bool, err error) {
	ok = true
	from, next := uint64(1), uint64(1)
	for step := 0; ok && (step == 0 || from < next); step++ {
		var did int64
		err = s.view(func(tx *bolt.Tx) error {
			if step == 0 {
				if ok, err = sealable(tx, start, end, w); err != nil || !ok {
					return err
				}
				if v := tx.Bucket(bucketMeta).Get(keyNextSID); len(v) == 8 {
					next = beUint64(v)
				}
			}
			sv, err := openSealed(tx, start, end-1)
			if err != nil {
				return err
			}
			defer sv.close()
			from, did, err = copyStep(tx, dst, sv, from, next, start, end, w)
			return err
		})
		if err == nil && ok {
			w.work += did
			err = s.pace(did)
		}
		if err == nil && ok && s.sealStep != nil {
			s.sealStep(did)
		}
		if err != nil {
			return false, err
		}
	}
	return ok, nil
}

// copyStep copies the points of [start, end) of the series from from on,
// up to next, sealBatch of them or sealStepWork of work, into dst in one
// transaction of it, and returns the series the next step starts at and
// its work.
func copyStep(tx *bolt.Tx, dst *bolt.DB, sv sealedView, from, next uint64, start, end int64, w *sealed) (uint64, int64, error) {
	blocks, ps := tx.Bucket(bucketBlocks), packSource(tx)
	id, last := from, min(next, from+sealBatch)
	var work int64
	err := dst.Update(func(out *bolt.Tx) error {
		b, err := out.CreateBucketIfNotExists(bucketBlocks)
		if err != nil {
			return err
		}
		b.FillPercent = 1
		bp := &blockPut{blocks: b}
		for ; id < last && work < sealStepWork; id++ {
			pts, typ, err := readMem(blocks, ps, id, start, end-1)
			if err != nil {
				return fmt.Errorf("series %d: %w", id, err)
			}
			if len(pts) > 0 {
				w.moved, w.types = append(w.moved, id), append(w.types, typ)
			}
			if pts, typ, err = sv.under(pts, id, start, end-1, typ); err != nil {
				return err
			}
			if len(pts) == 0 {
				continue
			}
			w.rec.minTS, w.rec.maxTS = min(w.rec.minTS, pts[0].ts), max(w.rec.maxTS, pts[len(pts)-1].ts)
			w.rec.blocks += int64((len(pts) + maxBlockPoints - 1) / maxBlockPoints)
			work += pointWork * int64(len(pts))
			if err := bp.put(id, pts, typ); err != nil {
				return err
			}
		}
		return nil
	})
	return id, work, err
}

// pace waits what the engine's limiter asks after a seal's step of n work
// (nothing when compaction is off), or until the shard closes.
func (s *boltShard) pace(n int64) error {
	if s.sealPace == nil || n == 0 {
		return nil
	}
	wait := s.sealPace.delay(int(n), time.Now())
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.stop:
		return ErrClosed
	case <-t.C:
		return nil
	}
}

// touched lowers sealWatch to lo: points at lo or later changed in the
// shard file (a seal under way gives up if lo is in its range or before).
// Called after the change is committed.
func (s *boltShard) touched(lo int64) {
	for {
		cur := s.sealWatch.Load()
		if lo >= cur || s.sealWatch.CompareAndSwap(cur, lo) {
			return
		}
	}
}

// oldestChange is the oldest ts a flush of mt changes: its oldest point,
// or its oldest delete's start.
func (mt *memtable) oldestChange() int64 {
	lo := int64(math.MaxInt64)
	for i := range mt.series {
		if pts := mt.series[i].pts; len(pts) > 0 {
			lo = min(lo, pts[0].ts)
		}
	}
	for _, d := range mt.dels {
		lo = min(lo, d.Min)
	}
	return lo
}
