package engine

import (
	"strings"

	bolt "go.etcd.io/bbolt"
)

// memtables are a shard's memtables, replaced as one value (with fmu held):
// readers load it once, so they see one memtable or the other on either
// side of a freeze or a flush's end, never neither (see flush.go).
type memtables struct {
	active *memtable // takes the commits
	frozen *memtable // being flushed; nil when none
}

// all lists the memtables oldest first: later ones win on the same ts.
func (m *memtables) all() []*memtable {
	if m.frozen == nil {
		return []*memtable{m.active}
	}
	return []*memtable{m.frozen, m.active}
}

// viewMems runs fn in a read transaction with the shard's memtables, loaded
// before the transaction begins: a reader that finds no frozen memtable
// sees the blocks its flush wrote.
func (s *boltShard) viewMems(fn func(*bolt.Tx, *memtables) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	m := s.mems.Load()
	return s.db.View(func(tx *bolt.Tx) error { return fn(tx, m) })
}

// collect is memtable.collect over both memtables, the active one winning;
// the frozen one's points that hide (the active one's deletes) are left out.
func (m *memtables) collect(metric string, match map[string]string, start, end int64, lim Limits, hide tombs) ([]memHit, error) {
	hits, err := m.active.collect(metric, match, start, end, lim)
	if err != nil || m.frozen == nil {
		return hits, err
	}
	older, err := m.frozen.collect(metric, match, start, end, lim)
	if err != nil {
		return nil, err
	}
	if len(hide) > 0 {
		kept := older[:0]
		for _, h := range older {
			r, err := hide.ranges(h.key)
			if err != nil {
				return nil, err
			}
			if h.points = hidePoints(h.points, r); len(h.points) > 0 {
				kept = append(kept, h)
			}
		}
		older = kept
	}
	return mergeByKey(older, hits, func(h memHit) string { return h.key }, func(o, n memHit) memHit {
		n.points = mergePoints(o.points, n.points)
		return n
	}), nil
}

// scanCopy is memtable.scanCopy over both memtables, the active one
// winning, with the strings of both; the frozen one's points that hide
// (the active one's deletes) are left out.
func (m *memtables) scanCopy(metric string, start, end int64, keep func(string) bool, hide tombs) ([]memRun, []strView, error) {
	runs, view := m.active.scanCopy(metric, start, end, keep)
	if m.frozen == nil {
		return runs, []strView{view}, nil
	}
	older, frozen := m.frozen.scanCopy(metric, start, end, keep)
	if len(hide) > 0 {
		kept := older[:0]
		for _, r := range older {
			rs, err := hide.ranges(r.key)
			if err != nil {
				return nil, nil, err
			}
			if r.pts = hideMem(r.pts, rs); len(r.pts) > 0 {
				kept = append(kept, r)
			}
		}
		older = kept
	}
	return mergeByKey(older, runs, func(r memRun) string { return r.key }, func(o, n memRun) memRun {
		n.pts = mergeSorted(o.pts, n.pts, func(p memPoint) int64 { return p.ts }, nil)
		return n
	}), []strView{view, frozen}, nil
}

// mergeByKey merges two lists sorted by key; on the same key, both merges
// the older and the newer element.
func mergeByKey[T any](older, newer []T, key func(T) string, both func(o, n T) T) []T {
	if len(older) == 0 {
		return newer
	}
	if len(newer) == 0 {
		return older
	}
	out := make([]T, 0, len(older)+len(newer))
	i, j := 0, 0
	for i < len(older) && j < len(newer) {
		switch c := strings.Compare(key(older[i]), key(newer[j])); {
		case c < 0:
			out = append(out, older[i])
			i++
		case c > 0:
			out = append(out, newer[j])
			j++
		default:
			out = append(out, both(older[i], newer[j]))
			i++
			j++
		}
	}
	out = append(out, older[i:]...)
	return append(out, newer[j:]...)
}

// eachKey calls fn with the key of each of the memtable's series.
func (mt *memtable) eachKey(fn func(key string) error) error {
	mt.mu.RLock()
	defer mt.mu.RUnlock()
	for _, ms := range mt.series {
		if err := fn(ms.key); err != nil {
			return err
		}
	}
	return nil
}
