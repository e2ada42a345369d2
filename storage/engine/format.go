package engine

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ShardFormat is the format version of the shard files this engine writes:
// 1 for float blocks only (releases up to 0.1.0, which do not mark it), 2
// since blocks of integer, unsigned, boolean and string fields (block
// version 2) and the strs and ftype buckets. A file marked newer is refused
// at open and when it arrives as a snapshot (a full sync from a newer
// leader), with both versions named: reading blocks or buckets of a format
// this binary does not know would answer wrong or nothing.
const ShardFormat = 2

// ErrNewerShardFormat: a shard file was written by a newer release.
var ErrNewerShardFormat = errors.New("shard file written in a newer format")

var keyFormat = []byte("format")

// checkFormat refuses a file of a newer format and marks one of this or an
// older one (or without a mark) with ShardFormat. Call in an update
// transaction, after the meta bucket exists.
func checkFormat(tx *bolt.Tx, path string) error {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); len(v) == 8 {
		if f := beUint64(v); f > ShardFormat {
			return fmt.Errorf("%w: %s is format %d; this cairn reads format %d and older: run the release that wrote it (or a newer one)",
				ErrNewerShardFormat, path, f, ShardFormat)
		} else if f == ShardFormat {
			return nil
		}
	} else if v != nil {
		return fmt.Errorf("%w: %s has an unreadable format mark %x", ErrCorrupt, path, v)
	}
	return meta.Put(keyFormat, u64Key(ShardFormat))
}
