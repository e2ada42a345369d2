package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Compaction merges a series' consecutive small blocks (one per flush) into
// blocks of up to maxBlockPoints, which is where most of the space saving of
// the block format comes from: a block's fixed costs (key, header, first
// timestamp and value in full) are paid once per thousand points instead of
// once per flush. It runs in the background in small steps, each one short
// bbolt commit that commits of entries never wait for, paced by an
// engine-wide rate limit on the bytes it rewrites.

// DefaultCompactRate is the default pace of background compaction, in block
// bytes read per second across all shards of the engine.
const DefaultCompactRate = 8 << 20

// compactBudget is how many blocks one compaction step looks at: a bound on
// how long it holds the shard's write mutex.
const compactBudget = 4096

// backgroundMinRun is how many small consecutive blocks the background
// compaction waits for before merging them, so a series' newest block is not
// rewritten after every flush.
const backgroundMinRun = 4

// Compacter is implemented by shards that can be fully compacted on demand.
type Compacter interface {
	// Compact merges every run of small blocks now and rewrites the shard
	// file without its free pages.
	Compact() error
}

// rateLimiter paces work shared by many goroutines to rate units per second.
type rateLimiter struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

// delay books n units of work just done and returns how long the caller
// must pause before doing more.
func (l *rateLimiter) delay(n int, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	return l.next.Sub(now)
}

// compactRun is a run of one series' consecutive small blocks, as found:
// their values stay in the step's transaction and are decoded only if the
// run is merged (at high cardinality most runs a pass meets are not).
type compactRun struct {
	keys   [][]byte
	vals   [][]byte
	counts []int // points of each block, in keys' order
	points int
	typ    models.FieldType
}

// A compaction policy: how many small consecutive blocks of a series make a
// run worth merging, and whether runs are tiered.
//
// Tiered (the background pass): a run's leading block that holds more
// points than the blocks after it together is left as it is. A series that
// gets a point or two per flush (many series, each flush holding few points
// of each) would otherwise have its growing newest merged block rewritten
// with every few flushes, every point of it each time, until the block is
// full: up to maxBlockPoints/minRun rewrites of each point. Tiered, blocks
// of like sizes merge, and a point is rewritten about log2 of its block's
// final size times.
type compactPolicy struct {
	minRun int
	tiered bool
}

var (
	backgroundCompact = compactPolicy{minRun: backgroundMinRun, tiered: true}
	fullCompact       = compactPolicy{minRun: 2}
)

// add appends a block to the run; k is copied into keys, a step's arena.
func (r *compactRun) add(keys *[]byte, k, v []byte, h blockHeader) {
	if len(*keys)+len(k) > cap(*keys) {
		*keys = make([]byte, 0, max(64<<10, len(k)))
	}
	start := len(*keys)
	*keys = append(*keys, k...)
	r.keys = append(r.keys, (*keys)[start:len(*keys):len(*keys)])
	r.vals = append(r.vals, v)
	r.counts = append(r.counts, h.count)
	r.points += h.count
	r.typ = h.typ
}

// decode decodes the run's blocks into buf (reused).
func (r *compactRun) decode(buf []memPoint) ([]memPoint, error) {
	buf = buf[:0]
	for _, v := range r.vals {
		var err error
		if buf, _, err = decodeBlock(buf, v); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// trim drops the leading blocks the policy leaves as they are (see
// compactPolicy) and says whether what is left is worth merging.
func (r *compactRun) trim(p compactPolicy) bool {
	if p.tiered {
		for len(r.keys) > 1 && r.counts[0] > r.points-r.counts[0] {
			r.points -= r.counts[0]
			r.keys, r.vals, r.counts = r.keys[1:], r.vals[1:], r.counts[1:]
		}
	}
	return len(r.keys) >= p.minRun
}

// compactStep merges runs of small consecutive blocks of one series (see
// compactPolicy), looking at up to budget blocks from where the last step
// stopped. It returns the block bytes it read and whether it reached the end.
//
// It does not take wmu: commits write only the write-ahead log, so they never
// wait for a compaction step; bbolt's single writer orders it with flushes.
func (s *boltShard) compactStep(budget int, pol compactPolicy) (int, bool, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, true, ErrClosed
	}
	var read int
	done := false
	err := s.update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketBlocks).Cursor()
		k, v := c.First()
		if s.compactAt != nil {
			k, v = c.Seek(s.compactAt)
		}
		// The last flush's blocks, walked beside the blocks (both in key
		// order): a look-up in recent for each block was a seek from the
		// root, and a pass reads every block header of the shard.
		rc := tx.Bucket(bucketRecent).Cursor()
		rk, _ := rc.Seek(k)
		var runs []compactRun
		var cur compactRun
		var keys []byte
		var curID uint64
		var curPoints int
		end := func() {
			if cur.trim(pol) {
				runs = append(runs, cur)
			}
			cur, curPoints = compactRun{}, 0
		}
		for n := 0; k != nil && n < budget; n++ {
			h, _, err := parseBlock(v)
			id := beUint64(k)
			for rk != nil && bytes.Compare(rk, k) < 0 {
				rk, _ = rc.Next()
			}
			// Corrupt blocks are left for reads to report, and the last
			// flush's blocks for repairTorn to check at the next open.
			isRecent := rk != nil && bytes.Equal(rk, k)
			if err != nil || isRecent || id != curID || curPoints+h.count > maxBlockPoints || h.typ != cur.typ && len(cur.keys) > 0 {
				end()
			}
			if err == nil && !isRecent && h.count < maxBlockPoints {
				cur.add(&keys, k, v, h)
				curID, curPoints = id, curPoints+h.count
			}
			read += len(v) // what is checked counts too: it is read and checksummed
			k, v = c.Next()
		}
		end()
		if k == nil {
			s.compactAt, done = nil, true
		} else {
			s.compactAt = append(s.compactAt[:0], k...)
		}
		bp := newBlockPut(tx, 0)
		var pts []memPoint
		for _, r := range runs {
			// Decoded before its blocks are deleted: bbolt keeps the
			// values of a transaction's reads until it ends.
			var err error
			if pts, err = r.decode(pts); err != nil {
				return err
			}
			for _, key := range r.keys {
				// Not the last flush's: no record in recent to drop (a
				// look-up there per block merged was a seek for nothing).
				if err := bp.blocks.Delete(key); err != nil {
					return err
				}
			}
			if err := bp.put(beUint64(r.keys[0]), pts, r.typ); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("engine: compact: %w", err)
	}
	s.dropMapped()
	return read, done, nil
}

// compactLoop runs a background compaction pass after flushes, at most one
// every interval, paced by the engine's limiter; an idle shard's loop sleeps
// until the next flush (a ticker per shard woke every replica of a node
// each second to find nothing). Close stops it.
func (s *boltShard) compactLoop(interval time.Duration, lim *rateLimiter) {
	defer close(s.compactDone)
	var last time.Time
	for {
		// A pass only after flushes: blocks change nowhere else, and a pass
		// reads every block header of the shard.
		select {
		case <-s.stop:
			return
		case <-s.flushSig:
		}
		if wait := interval - time.Since(last); wait > 0 {
			select {
			case <-s.stop:
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if !s.flushed.Swap(false) {
			continue
		}
		for done := false; !done; {
			n, d, err := s.compactStep(compactBudget, backgroundCompact)
			if err != nil {
				break // closed, or tried again after the next flush
			}
			done = d
			if wait := lim.delay(n, time.Now()); wait > 0 {
				select {
				case <-s.stop:
					return
				case <-time.After(wait):
				}
			}
		}
		// An error: tried again after the next flush.
		if n, err := s.compactPacks(false); err == nil && n > 0 {
			if wait := lim.delay(n, time.Now()); wait > 0 {
				select {
				case <-s.stop:
					return
				case <-time.After(wait):
				}
			}
		}
	}
}

// Compact flushes the memtable (so the log can be trimmed to its bounds),
// merges every run of two or more small blocks, then rewrites the shard file
// so the pages freed by compaction and by the trimmed log are given back to
// the file system.
func (s *boltShard) Compact() error {
	s.wmu.Lock()
	err := s.flushLocked()
	s.wmu.Unlock()
	if err != nil {
		return err
	}
	if err := s.settleRecent(); err != nil {
		return err
	}
	for n := 1; n > 0; {
		var err error
		if n, err = s.compactPacks(true); err != nil {
			return err
		}
	}
	for done := false; !done; {
		var err error
		if _, done, err = s.compactStep(1<<30, fullCompact); err != nil {
			return err
		}
	}
	return s.rewriteFile()
}

// settleRecent checks the last flush's blocks now, and when they are whole,
// lets compaction merge them like any other.
func (s *boltShard) settleRecent() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed() {
		return ErrClosed
	}
	return s.update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketRecent).ForEach(func(k, _ []byte) error {
			return checkRecent(tx, k)
		})
		if err != nil {
			return err // reopening the shard redoes that flush from the log
		}
		if err := tx.Bucket(bucketMeta).Put(keyRecentFrom, u64Key(0)); err != nil {
			return err
		}
		return resetRecent(tx)
	})
}

// rewriteFile copies the shard into a fresh file, packed full, and swaps it
// in with a rename; readers wait for the swap.
func (s *boltShard) rewriteFile() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return ErrClosed
	}
	tmp := s.path + ".compact"
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, boltOptions())
	if err != nil {
		return fmt.Errorf("engine: compact file: %w", err)
	}
	dst.AllocSize = allocSize
	err = bolt.Compact(dst, s.db, 64<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("engine: compact file: %w", err)
	}
	if err := s.replaceFile(tmp, "compact file"); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// replaceFile puts the synced bolt file tmp in place of the shard's file:
// close, rename, directory fsync, reopen. It reopens whatever file is in
// place afterwards (the new one, or the old one if the rename failed), so
// the shard stays usable either way. Call with s.mu held and s.db open.
func (s *boltShard) replaceFile(tmp, what string) error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("engine: %s: close: %w", what, err)
	}
	forgetPacks(s.db)
	s.db = nil
	renameErr := os.Rename(tmp, s.path)
	if renameErr == nil {
		renameErr = syncDir(filepath.Dir(s.path))
	}
	db, err := openBolt(s.path)
	if err != nil {
		return fmt.Errorf("engine: %s: reopen: %w", what, errors.Join(renameErr, err))
	}
	s.db = db
	if renameErr != nil {
		return fmt.Errorf("engine: %s: %w", what, renameErr)
	}
	// A restored file records other partitions: open them, drop the old.
	return s.loadParts()
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
