package engine

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// seriesIndex is a shard's series key -> id map, loaded at open. Each key is
// held as one string for the shard's lifetime, which the memtable reuses
// (interning) instead of allocating a key per series per flush cycle.
//
// Series ids are dense (a shard numbers its series 1, 2, ...), so what is
// known per id lives in slices indexed by id rather than in maps: with a
// million series the index was three map entries per series (key -> id,
// id -> key, id -> newest ts), most of a node's live heap and of what the
// collector had to scan and rehash as series arrived. Now it is one map
// entry and a 40-byte slot per series (seriesSlot), and bytes() accounts
// for it.
type seriesIndex struct {
	mu    sync.RWMutex
	ids   map[string]uint64
	slots []seriesSlot // by id; a zero key where no series has that id
	// gen numbers the shard's memtables (seriesSlot.gen).
	gen      atomic.Uint32
	keyBytes int64 // the keys' bytes, for bytes()
	// The size of the last flushed memtable (series, points per series):
	// the next one starts with room for as much, instead of growing every
	// series' points and its maps step by step again.
	lastSeries, lastPerSeries atomic.Int64
	// size is bytes() as of the last change, for the engine's account.
	size atomic.Int64
	// ft is the shard's field types, nextStr the id of its next string
	// (types.go).
	ft      fieldTypes
	nextStr atomic.Uint64
	// gone holds the series a delete left no point (gone.go); nil: none.
	gone map[uint64]struct{}
}

// seriesSlot is what the index knows of series id.
//
// key and newest change under mu's write side. newest bounds the series'
// newest flushed ts from above (math.MaxInt64: unknown, for the series not
// flushed since the shard was opened): a flush then appends without
// looking up the series' last block, and the memtable keeps no undo for
// points after it.
//
// follow, gen and pos belong to the shard's writer, the one goroutine that
// inserts into its active memtable (under the shard's write mutex), which
// changes them under mu's read side: nobody else reads them. With a
// million series a memtable holds a point or two of each, so a series is
// new to nearly every memtable it gets a point in; finding it by hashing
// its key into the memtable's map, missing, hashing it again into this
// index's map (neither fits the caches) and adding it to the memtable's map
// was the memtable insert's largest cost (issue 21). follow names the
// series written after this one last time: writers send their series in
// much the same order batch after batch, so it names the next series with
// one key comparison across memtables, as memSeries.next does within one;
// gen and pos are the series' place in the memtable numbered gen (the
// active one, or the frozen one under it), which spares the memtable a map
// of the series it holds that have ids.
type seriesSlot struct {
	key    string
	newest int64
	follow uint64
	gen    uint32
	pos    int32
}

// maxSeriesID bounds the series ids an index holds in its slices: an id
// past it in a file is corruption, not a shard with that many series.
const maxSeriesID = 1 << 32

// Estimated heap bytes per indexed series besides its key: the map entry
// (key header, id, the map's slack and control bytes) and its slot, with
// the slice's growth slack.
const indexSeriesBytes = 64 + 2*40

func newSeriesIndex() *seriesIndex {
	ix := &seriesIndex{ids: make(map[string]uint64), slots: []seriesSlot{{newest: math.MaxInt64}}}
	ix.nextStr.Store(1)
	return ix
}

func loadIndex(tx *bolt.Tx) (*seriesIndex, error) {
	ix := newSeriesIndex()
	ix.nextStr.Store(loadNextStr(tx))
	if err := loadTypes(tx, &ix.ft); err != nil {
		return nil, err
	}
	b := tx.Bucket(bucketSKey)
	if b == nil {
		return ix, nil // a read-only look at a file of an older version
	}
	if n := b.Stats().KeyN; n > 0 {
		ix.ids = make(map[string]uint64, n)
		ix.slots = make([]seriesSlot, 1, n+1)
		ix.slots[0].newest = math.MaxInt64
	}
	err := b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("%w: series id key of %d bytes", ErrCorrupt, len(k))
		}
		id := beUint64(k)
		if id == 0 || id > maxSeriesID {
			return fmt.Errorf("%w: series id %d", ErrCorrupt, id)
		}
		ix.put(string(v), id)
		return nil
	})
	ix.size.Store(ix.bytesLocked())
	if err != nil {
		return ix, err
	}
	return ix, loadGone(tx, ix)
}

// put indexes key as id; the caller holds mu (or owns ix).
func (ix *seriesIndex) put(key string, id uint64) {
	ix.ids[key] = id
	ix.grow(id)
	ix.slots[id].key = key
	ix.keyBytes += int64(len(key))
}

// grow makes the slots up to id; the caller holds mu.
func (ix *seriesIndex) grow(id uint64) {
	for uint64(len(ix.slots)) <= id {
		ix.slots = append(ix.slots, seriesSlot{newest: math.MaxInt64})
	}
}

// bytesLocked estimates the index's heap; the caller holds mu.
func (ix *seriesIndex) bytesLocked() int64 {
	return ix.keyBytes + int64(len(ix.ids))*indexSeriesBytes
}

// bytes is the index's estimated heap as of its last change.
func (ix *seriesIndex) bytes() int64 { return ix.size.Load() }

func (ix *seriesIndex) id(key string) (uint64, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.ids[key]
	return id, ok
}

// keyOf is the key of series id, if indexed.
func (ix *seriesIndex) keyOf(id uint64) (string, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if id >= uint64(len(ix.slots)) || ix.slots[id].key == "" {
		return "", false
	}
	return ix.slots[id].key, true
}

// seriesMax is a series' newest flushed ts after a flush.
type seriesMax struct {
	id uint64
	ts int64
}

// indexedSeries is a series a flush created, with its id.
type indexedSeries struct {
	key string
	id  uint64
}

// add indexes the series a flush created. A slice, not a map: a flush of
// many new series (a million-series node's) hashed each key into a map
// that grew from empty at every flush, only to hash it again here.
func (ix *seriesIndex) add(created []indexedSeries) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, c := range created {
		ix.put(c.key, c.id)
	}
	ix.size.Store(ix.bytesLocked())
}

// setNewest records the series' newest flushed ts after a flush. A series
// created by that flush is not indexed yet (add follows the commit): its
// slot is made here.
func (ix *seriesIndex) setNewest(newest []seriesMax) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, n := range newest {
		ix.grow(n.id)
		ix.slots[n.id].newest = n.ts
	}
}
