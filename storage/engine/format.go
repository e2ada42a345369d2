package engine

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ShardFormat is the format version of the shard files this engine writes:
// 1 for float blocks only (releases up to 0.1.0, which do not mark it), 2
// since blocks of integer, unsigned, boolean and string fields (block
// version 2) and the strs and ftype buckets, 3 since packs (packs.go), 4
// since sealed time partitions (partition.go). A file is marked 3 only by
// the first flush that writes a pack, and 4 only by the first seal, so a
// file without one still opens in the release before. A file marked newer is refused
// at open and when it arrives as a snapshot (a full sync from a newer
// leader), with both versions named: reading blocks or buckets of a format
// this binary does not know would answer wrong or nothing.
const ShardFormat = 4

// openFormat is what opening a file of an older format (or without a mark)
// marks it with; packFormat is what the first pack raises it to.
const (
	openFormat = 2
	packFormat = PackFormat
)

// PackFormat is the first shard format with packed blocks: a peer of an
// older protocol (models.ProtocolPacks) is sent no snapshot of such a file.
const PackFormat = 3

// ErrNewerShardFormat: a shard file was written by a newer release.
var ErrNewerShardFormat = errors.New("shard file written in a newer format")

var keyFormat = []byte("format")

// checkFormat refuses a file of a newer format and marks one of an older
// one (or without a mark) with openFormat. Call in an update
// transaction, after the meta bucket exists.
func checkFormat(tx *bolt.Tx, path string) error {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); len(v) == 8 {
		if f := beUint64(v); f > ShardFormat {
			return fmt.Errorf("%w: %s is format %d; this cairn reads format %d and older: run the release that wrote it (or a newer one)",
				ErrNewerShardFormat, path, f, ShardFormat)
		} else if f >= openFormat {
			return nil
		}
	} else if v != nil {
		return fmt.Errorf("%w: %s has an unreadable format mark %x", ErrCorrupt, path, v)
	}
	return meta.Put(keyFormat, u64Key(openFormat))
}

// markFormat raises the file's format mark to f if it is below.
func markFormat(tx *bolt.Tx, f uint64) error {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); len(v) == 8 && beUint64(v) >= f {
		return nil
	}
	return meta.Put(keyFormat, u64Key(f))
}

// fileFormat is the file's format mark (0: none).
func fileFormat(tx *bolt.Tx) uint64 {
	if v := tx.Bucket(bucketMeta).Get(keyFormat); len(v) == 8 {
		return beUint64(v)
	}
	return 0
}
