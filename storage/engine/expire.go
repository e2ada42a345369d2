package engine

import (
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// Expirer is implemented by shards that can drop the points a retention
// expired.
type Expirer interface {
	// ExpireBefore deletes every block whose points are all older than
	// cutoff (unix ns) and returns how many blocks and bytes it dropped;
	// when they were a large part of the file, it rewrites the file so the
	// space goes back to the file system. A block that straddles cutoff
	// stays until all of it is older (reads of a database with a retention
	// never ask for the expired part); points still in the memtable wait
	// for a pass after their flush.
	ExpireBefore(cutoff int64) (blocks int, bytes int64, err error)
	// OldestBlock is the first ts of the shard's oldest block (ok false:
	// it holds none): where deleting under disk pressure starts.
	OldestBlock() (ts int64, ok bool, err error)
}

func (s *boltShard) OldestBlock() (int64, bool, error) {
	var oldest int64
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		if oldest, found, err = fileOldest(tx); err != nil {
			return err
		}
		recs, err := readParts(tx)
		if len(recs) > 0 && (!found || recs[0].minTS < oldest) {
			oldest, found = recs[0].minTS, true // by start, so by points too
		}
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("engine: oldest block: %w", err)
	}
	return oldest, found, nil
}

// fileOldest is the first ts of the shard file's oldest block or pack
// (sealed partitions aside).
func fileOldest(tx *bolt.Tx) (oldest int64, found bool, err error) {
	c := tx.Bucket(bucketBlocks).Cursor()
	// A series' first block is its oldest: one seek per series.
	for k, _ := c.First(); k != nil; k, _ = c.Seek(u64Key(beUint64(k) + 1)) {
		if ts := tsFromKey(k[8:]); !found || ts < oldest {
			oldest, found = ts, true
		}
	}
	if b := tx.Bucket(bucketPacks); b != nil {
		err = b.ForEach(func(k, v []byte) error {
			h, _, _, err := parsePack(v)
			if err != nil {
				return fmt.Errorf("pack %x: %w", k, err)
			}
			if !found || h.minTS < oldest {
				oldest, found = h.minTS, true
			}
			return nil
		})
	}
	return oldest, found, err
}

// expireBudget is how many blocks one expiry step looks at, as compaction's
// steps: a bound on how long it holds bbolt's writer.
const expireBudget = 4096

// rewriteShare: the file is rewritten when its free pages reach this share
// (1/rewriteShare) of it: bbolt reuses freed pages but never shrinks its
// file by itself.
const rewriteShare = 4

func (s *boltShard) ExpireBefore(cutoff int64) (int, int64, error) {
	// The last flush's blocks are checked first, as a compaction does, so
	// an idle shard's newest flush expires too.
	if err := s.settleRecent(); err != nil {
		return 0, 0, fmt.Errorf("engine: expire: %w", err)
	}
	// Sealed partitions go whole, their files with them (partition.go).
	pn, pbytes, err := s.expireParts(cutoff)
	if err != nil {
		return pn, pbytes, fmt.Errorf("engine: expire: %w", err)
	}
	blocks, bytes, err := s.expirePacks(cutoff)
	if err != nil {
		return pn, pbytes, fmt.Errorf("engine: expire: %w", err)
	}
	var at []byte
	for {
		n, b, next, err := s.expireStep(cutoff, at)
		blocks, bytes = blocks+n, bytes+b
		if err != nil {
			return pn + blocks, pbytes + bytes, fmt.Errorf("engine: expire: %w", err)
		}
		if next == nil {
			break
		}
		at = next
	}
	if blocks == 0 {
		return pn, pbytes, nil
	}
	s.dropMapped()
	if s.mostlyFree() {
		if err := s.rewriteFile(); err != nil {
			return pn + blocks, pbytes + bytes, err
		}
	}
	return pn + blocks, pbytes + bytes, nil
}

// expireParts drops the sealed partitions whose points are all older than
// cutoff: their records in one transaction, then their files. It returns
// how many blocks and bytes they held.
func (s *boltShard) expireParts(cutoff int64) (n int, bytes int64, err error) {
	s.cmu.Lock() // not beside a seal
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, 0, ErrClosed
	}
	var gone []uint64
	err = s.update(func(tx *bolt.Tx) error {
		recs, err := readParts(tx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.maxTS >= cutoff {
				break // by start, so by points too
			}
			if err := tx.Bucket(bucketParts).Delete(tsKey(r.start)); err != nil {
				return err
			}
			gone = append(gone, r.fileID)
			n, bytes = n+int(r.blocks), bytes+r.size
		}
		if len(gone) == 0 {
			return nil
		}
		// The rollups' cells there are now the only record (rollup.go).
		return raiseFloor(tx, keyRawFloor, cutoff)
	})
	if err != nil {
		return 0, 0, err
	}
	return n, bytes, s.retireParts(gone)
}

// mostlyFree: a share of the file (1/rewriteShare or more) is free pages.
func (s *boltShard) mostlyFree() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return false
	}
	st, info := s.db.Stats(), s.db.Info()
	fi, err := os.Stat(s.path)
	if err != nil || fi.Size() == 0 {
		return false
	}
	free := int64(st.FreePageN+st.PendingPageN) * int64(info.PageSize)
	return free*rewriteShare >= fi.Size()
}

// expireStep deletes the expired blocks among up to expireBudget blocks
// from at (nil: the first) and returns where the following step starts
// (nil at the end). A series' blocks are keyed by their first time, so past
// its first block that starts at or after cutoff none is older: the step
// seeks to the next series, and a pass costs the series and the expired
// blocks, not every block of the shard.
func (s *boltShard) expireStep(cutoff int64, at []byte) (n int, bytes int64, next []byte, err error) {
	s.cmu.Lock() // not beside a compaction step: both rewrite blocks
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, 0, nil, ErrClosed
	}
	err = s.update(func(tx *bolt.Tx) error {
		blocks, recent := tx.Bucket(bucketBlocks), tx.Bucket(bucketRecent)
		c := blocks.Cursor()
		k, v := c.First()
		if at != nil {
			k, v = c.Seek(at)
		}
		var drop [][]byte
		for i := 0; k != nil && i < expireBudget; i++ {
			if tsFromKey(k[8:]) >= cutoff {
				k, v = c.Seek(u64Key(beUint64(k) + 1))
				continue
			}
			if h, _, perr := parseBlock(v); perr == nil && h.maxTS < cutoff && recent.Get(k) == nil {
				drop = append(drop, append([]byte(nil), k...))
				bytes += int64(len(k) + len(v))
			}
			k, v = c.Next()
		}
		if k != nil {
			next = append([]byte(nil), k...)
		}
		for _, key := range drop {
			if err := blocks.Delete(key); err != nil { // not in recent (above)
				return err
			}
		}
		n = len(drop)
		if n == 0 {
			return nil
		}
		// The rollups' cells there are now the only record (rollup.go).
		return raiseFloor(tx, keyRawFloor, cutoff)
	})
	return n, bytes, next, err
}

// expirePacks deletes the packs whose points are all older than cutoff
// (but the last flush's, as blocks) and returns how many series blocks and
// bytes they held. The oldest pack is not always the one with the oldest
// points (a flush of late points), so every pack's header is read: there
// are few.
func (s *boltShard) expirePacks(cutoff int64) (n int, bytes int64, err error) {
	s.cmu.Lock() // not beside a compaction step: both rewrite blocks
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, 0, ErrClosed
	}
	var gone []uint64
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPacks)
		if b == nil {
			return nil
		}
		recent := tx.Bucket(bucketRecent)
		err := b.ForEach(func(k, v []byte) error {
			h, dir, _, perr := parsePack(v)
			if perr == nil && h.maxTS < cutoff && recent.Get(packRecentKey(beUint64(k))) == nil {
				gone = append(gone, beUint64(k))
				n += len(dir) / packDirEntry
				bytes += int64(len(k) + len(v))
			}
			return nil
		})
		if err != nil || len(gone) == 0 {
			return err
		}
		for _, seq := range gone {
			if err := b.Delete(u64Key(seq)); err != nil {
				return err
			}
		}
		// The rollups' cells there are now the only record (rollup.go).
		return raiseFloor(tx, keyRawFloor, cutoff)
	})
	if err != nil {
		return 0, 0, err
	}
	s.forgetPacks(gone)
	return n, bytes, nil
}
