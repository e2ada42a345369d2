package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Index is a shard's query index: the measurements, tag keys, tag values and
// fields it holds, for InfluxQL's SHOW statements and query planning. The
// shards of NewBoltEngine implement it (type-assert a Shard). Answers are
// sorted and include points not flushed yet.
type Index interface {
	Measurements() ([]string, error)
	TagKeys(metric string) ([]string, error)
	TagValues(metric, key string) ([]string, error)
	FieldKeys(metric string) ([]string, error)
}

func (s *boltShard) Measurements() ([]string, error) {
	return s.indexList(postingPrefix(postMetric), func(m string, _ []lineproto.Tag, _ string) []string { return []string{m} })
}

func (s *boltShard) TagKeys(metric string) ([]string, error) {
	return s.indexList(postingPrefix(postTag, metric), func(m string, tags []lineproto.Tag, _ string) []string {
		if m != metric {
			return nil
		}
		out := make([]string, len(tags))
		for i, t := range tags {
			out[i] = t.Key
		}
		return out
	})
}

func (s *boltShard) TagValues(metric, key string) ([]string, error) {
	return s.indexList(postingPrefix(postTag, metric, key), func(m string, tags []lineproto.Tag, _ string) []string {
		if m != metric {
			return nil
		}
		for _, t := range tags {
			if t.Key == key {
				return []string{t.Value}
			}
		}
		return nil
	})
}

func (s *boltShard) FieldKeys(metric string) ([]string, error) {
	return s.indexList(postingPrefix(postField, metric), func(m string, _ []lineproto.Tag, f string) []string {
		if m != metric {
			return nil
		}
		return []string{f}
	})
}

// indexList collects the first string after prefix of every posting key
// under prefix, and what mem says of each memtable series; sorted, unique.
func (s *boltShard) indexList(prefix []byte, mem func(string, []lineproto.Tag, string) []string) ([]string, error) {
	var out []string
	err := s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		c := tx.Bucket(bucketPost).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			rest := k[len(prefix):]
			n, w := binary.Uvarint(rest)
			if w <= 0 || uint64(len(rest)-w) < n {
				return fmt.Errorf("%w: posting key %q", ErrCorrupt, k)
			}
			out = append(out, string(rest[w:w+int(n)]))
		}
		for _, mt := range m.all() {
			if err := mt.eachKey(func(key string) error {
				m, tags, f, err := lineproto.ParseSeriesKey(key)
				if err != nil {
					return fmt.Errorf("%w: %v", ErrCorrupt, err)
				}
				out = append(out, mem(m, tags, f)...)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine: index: %w", err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
