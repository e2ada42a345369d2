package engine

import (
	bolt "go.etcd.io/bbolt"
)

// SeriesKeys calls visit once with the key of every series the shard holds,
// flushed or still in the memtable, flushed ones in byte order first. It is the
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
		c := tx.Bucket(bucketSeries).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				continue // not a series bucket
			}
			delete(pending, string(k))
			if err := visit(string(k)); err != nil {
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
