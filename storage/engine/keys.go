package engine

import (
	bolt "go.etcd.io/bbolt"
)

// SeriesKeys calls visit once with the key of every series the shard holds,
// flushed (from the series index, in id order) or still in the memtable. It is the
// series enumeration behind InfluxQL's SHOW statements; it reads no points. A
// visit error stops the walk and is returned as is.
func (s *boltShard) SeriesKeys(visit func(key string) error) error {
	return s.view(func(tx *bolt.Tx) error {
		// s.mem is stable while view holds mu (see Query).
		s.mem.mu.RLock()
		pending := make(map[string]struct{}, len(s.mem.series))
		for _, ms := range s.mem.series {
			pending[ms.key] = struct{}{}
		}
		s.mem.mu.RUnlock()
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
