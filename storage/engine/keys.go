package engine

import (
	bolt "go.etcd.io/bbolt"
)

// SeriesKeys calls visit once with the key of every series the shard holds,
// flushed (from the series index, in id order) or still in the memtable. It is the
// series enumeration behind InfluxQL's SHOW statements; it reads no points. A
// visit error stops the walk and is returned as is. A gone series (one a
// delete left no point, gone.go) is not listed.
func (s *boltShard) SeriesKeys(visit func(key string) error) error {
	return s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		hideBlocks, hideFrozen := m.pending()
		dropBlocks, dropFrozen := dropsAll(hideBlocks), dropsAll(hideFrozen)
		m.active.mu.RLock() // commits append to its series meanwhile
		n := len(m.active.series)
		m.active.mu.RUnlock()
		pending := make(map[string]struct{}, n)
		for _, mt := range m.all() {
			mt.mu.RLock()
			for _, ms := range mt.series {
				// None: a delete emptied it; the frozen memtable's points
				// under a drop of the active one are gone too.
				if len(ms.pts) > 0 && (mt == m.active || !dropFrozen.covers(ms.key)) {
					pending[ms.key] = struct{}{}
				}
			}
			mt.mu.RUnlock()
		}
		gone := s.ix.goneSet()
		c := tx.Bucket(bucketSKey).Cursor()
		for id, key := c.First(); key != nil; id, key = c.Next() {
			_, inMem := pending[string(key)]
			delete(pending, string(key))
			if !inMem && len(id) == 8 {
				if _, g := gone[beUint64(id)]; g || dropBlocks.covers(string(key)) {
					continue
				}
			}
			if err := visit(string(key)); err != nil {
				return err
			}
		}
		for k := range pending {
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	})
}
