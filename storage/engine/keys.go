package engine

import (
	bolt "go.etcd.io/bbolt"
)

// SeriesKeys calls visit once with the key of every series the shard holds,
// flushed (from the series index, in id order) or still in the memtable. It is the
// series enumeration behind InfluxQL's SHOW statements; it reads no points. A
// visit error stops the walk and is returned as is.
func (s *boltShard) SeriesKeys(visit func(key string) error) error {
	return s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		pending := make(map[string]struct{}, len(m.active.series))
		for _, mt := range m.all() {
			mt.mu.RLock()
			for _, ms := range mt.series {
				if len(ms.pts) > 0 { // none: a delete emptied it
					pending[ms.key] = struct{}{}
				}
			}
			mt.mu.RUnlock()
		}
		c := tx.Bucket(bucketSKey).Cursor()
		for _, key := c.First(); key != nil; _, key = c.Next() {
			delete(pending, string(key))
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
