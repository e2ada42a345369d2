package engine

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// packCompactCount: background compaction merges the packs into the series'
// own blocks once a shard holds this many. A read of a series checks each
// pack whose ranges cover it, and a merge's puts, one per series, then
// carry the points of as many flushes. The merge costs about a put per
// series whatever the points it carries, so merging more flushes at once
// costs less per point: at a million series on 8 shards, 8 packs made the
// merges a tenth of a node's CPU while it took new series; 32 cut
// BenchmarkFlushManySeries (flush and merge, 100k series x 10 points) from
// 255 to 210 ns a point and its allocations from 142k to 33k a flush.
const packCompactCount = 32

// packMaxCount bounds the packs of a shard: past it (compaction off, or
// behind) flushes write blocks of their own again, so a read never checks
// more packs than this.
const packMaxCount = 4 * packCompactCount

// packCompactBytes bounds the packs one merge takes: their series' blocks
// stay in memory until its commit.
const packCompactBytes = 64 << 20

// packRecentKey is a pack's record in the recent bucket (see repairTorn):
// 9 bytes, where blocks' records are 16.
func packRecentKey(seq uint64) []byte { return append([]byte{'p'}, u64Key(seq)...) }

func isPackRecent(k []byte) bool { return len(k) == 9 && k[0] == 'p' }

// compactPacks merges the oldest packs (up to packCompactBytes) into the
// blocks of the series they hold, if the shard holds packCompactCount or
// more (any, with all) that the last flush did not write, and returns the
// bytes of the packs it merged (0: none).
func (s *boltShard) compactPacks(all bool) (int, error) {
	s.cmu.Lock() // not beside a compaction or expiry step: they rewrite blocks
	defer s.cmu.Unlock()
	if s.closed() {
		return 0, ErrClosed
	}
	var gone []uint64
	size := 0
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPacks)
		if b == nil {
			return nil
		}
		recent := tx.Bucket(bucketRecent)
		var vals [][]byte
		n, taking := 0, true
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n++
			if recent.Get(packRecentKey(beUint64(k))) != nil || size+len(v) > packCompactBytes && len(gone) > 0 {
				taking = false
			}
			if taking {
				gone, vals, size = append(gone, beUint64(k)), append(vals, v), size+len(v)
			}
		}
		if len(gone) == 0 || !all && n < packCompactCount {
			gone, size = nil, 0
			return nil
		}
		if err := mergePacks(tx, vals); err != nil {
			return err
		}
		for _, seq := range gone {
			if err := b.Delete(u64Key(seq)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("engine: compact packs: %w", err)
	}
	s.forgetPacks(gone)
	return size, nil
}

// forgetPacks drops the heads of deleted packs from the shard's list, once
// no reader holds a transaction that may still see them (readers hold mu
// shared for their transaction and their look at the list).
func (s *boltShard) forgetPacks(seqs []uint64) {
	if len(seqs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return
	}
	v, ok := packLists.Load(s.db)
	if !ok {
		return
	}
	pl := v.(*packList)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(pl.load()), func(h packHead) bool { return slices.Contains(seqs, h.seq) })
	pl.heads.Store(&next)
}

// mergePacks moves every series' blocks in the packs vals (in sequence
// order) into its own blocks: walking the packs' directories together in
// id order, so the puts walk the blocks bucket once.
func mergePacks(tx *bolt.Tx, vals [][]byte) error {
	dirs, datas := make([][]byte, len(vals)), make([][]byte, len(vals))
	for i, v := range vals {
		_, dir, data, err := parsePack(v)
		if err != nil {
			return err
		}
		dirs[i], datas[i] = dir, data
	}
	pos, starts := make([]int, len(vals)), make([]int, len(vals))
	bp := newBlockPut(tx, 0)
	var pts []memPoint
	for {
		id, any := uint64(0), false
		for i, dir := range dirs {
			if pos[i] < len(dir) {
				if d := binary.BigEndian.Uint64(dir[pos[i]:]); !any || d < id {
					id, any = d, true
				}
			}
		}
		if !any {
			return nil
		}
		pts = pts[:0]
		var typ models.FieldType
		for i, dir := range dirs {
			if pos[i] >= len(dir) || binary.BigEndian.Uint64(dir[pos[i]:]) != id {
				continue
			}
			end := int(binary.BigEndian.Uint32(dir[pos[i]+8:]))
			if end < starts[i] || end > len(datas[i]) {
				return fmt.Errorf("%w: pack entry of series %d", ErrBlockCorrupt, id)
			}
			var t models.FieldType
			var err error
			n := len(pts)
			if pts, t, err = decodeBlock(pts, datas[i][starts[i]:end]); err != nil {
				return fmt.Errorf("series %d: %w", id, err)
			}
			if n > 0 && t != typ {
				return fmt.Errorf("%w: series %d packed as %s and %s", ErrCorrupt, id, typ, t)
			}
			typ = t
			pos[i], starts[i] = pos[i]+packDirEntry, end
		}
		if len(pts) == 0 {
			continue
		}
		if !slices.IsSortedFunc(pts, func(a, b memPoint) int { return cmpPointTS(a, b.ts) }) {
			return fmt.Errorf("%w: series %d's packed points out of order", ErrCorrupt, id)
		}
		err := rewriteBlocks(tx, bp, id, typ, pts[0].ts, pts[len(pts)-1].ts, pts, func(old []memPoint) []memPoint { return old })
		if err != nil {
			return fmt.Errorf("series %d: %w", id, err)
		}
	}
}
