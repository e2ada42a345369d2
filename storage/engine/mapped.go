package engine

import (
	"runtime"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// A shard file is read through bbolt's read-only shared mapping, and every
// page a read touches stays mapped, so counted in the process's resident
// memory, until it is unmapped: a flush reads the leaf of every series it
// appends to, a compaction pass every block, so left alone a node's RSS
// grows toward the size of all its shard files. dropMapped releases the
// mapping's pages after each of them; the data stays in the kernel's page
// cache (reclaimable, shared) and the next read maps it again at the cost
// of a minor fault per page. bbolt never writes through the mapping, so
// nothing is lost.
func (s *boltShard) dropMapped() {
	// A read transaction holds bbolt's mmap lock: the mapping cannot move
	// or be unmapped while its pages are released.
	_ = s.view(func(tx *bolt.Tx) error {
		info := tx.DB().Info()
		return releaseMapped(info.Data, uintptr(tx.Size()))
	})
}

// flushSlots bounds how many shards of an engine flush at once:
// GOMAXPROCS/2, 2 to 4. A flush holds the blocks it writes and every leaf
// page it rewrites in memory until its commit; flushing the shards of a
// node a few at a time bounds that transient memory. Not one at a time:
// a commit that must freeze a memtable while the shard's last one is still
// frozen waits for that flush, which with one slot queued behind the other
// shards' flushes (with a million series, each a second or more: batches
// waited 15 s on 2 cores, 1.9 s with two slots; issue 21).
type flushSlots struct {
	once sync.Once
	ch   chan struct{}
}

func (f *flushSlots) take() func() {
	f.once.Do(func() {
		if f.ch == nil {
			f.ch = make(chan struct{}, min(max(runtime.GOMAXPROCS(0)/2, 2), 4))
		}
	})
	f.ch <- struct{}{}
	return func() { <-f.ch }
}

// flushSlot waits for one of the engine's flush slots and returns what
// ends the flush: it gives the slot back and releases the file pages the
// flush mapped.
func (s *boltShard) flushSlot() func() {
	release := s.memAcct.slots.take()
	return func() {
		release()
		s.dropMapped()
	}
}
