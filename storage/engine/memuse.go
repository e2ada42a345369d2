package engine

// MemoryReporter is implemented by the engine of NewBoltEngine
// (type-assert an Engine): what its open shards hold in memory by its own
// account, for the node's memory policy and its metrics.
type MemoryReporter interface {
	MemoryUse() MemoryUse
}

// MemoryUse is an engine's accounted heap, in bytes.
type MemoryUse struct {
	// Memtables is the active memtables' estimate, which the memtable
	// budget plus Index bounds (reaching it flushes, and writers wait for
	// flushes): room for every indexed series once beside the budget.
	Memtables int64
	// Frozen is the memtables being flushed: at most one per shard, each
	// within the bound when it froze.
	Frozen int64
	// Index is the series indexes: it grows with the series a node holds,
	// not with the write rate, and no budget bounds it.
	Index int64
}

func (e *boltEngine) MemoryUse() MemoryUse {
	return MemoryUse{Memtables: e.mem.bytes.Load(), Frozen: e.mem.frozen.Load(), Index: e.mem.index.Load()}
}

// chargeIndex brings the engine's account of this shard's series index up
// to date (to 0 once closed).
func (s *boltShard) chargeIndex(closed bool) {
	var b int64
	if !closed && s.ix != nil {
		b = s.ix.bytes()
	}
	s.memAcct.index.Add(b - s.ixCharged.Swap(b))
}
