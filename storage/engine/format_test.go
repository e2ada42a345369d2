package engine

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func setFormat(t *testing.T, s Shard, f uint64) {
	t.Helper()
	require.NoError(t, s.(*boltShard).db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, u64Key(f))
	}))
}

// TestShardFormat: a shard file is marked with the format of the release
// before packs until it holds one (an unmarked one, as 0.1.0 wrote them,
// too); one marked newer is refused at
// open and as a snapshot, naming both versions, and the shard it would
// have replaced keeps its data.
func TestShardFormat(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, dir)
	s, err := e.Open("db1", 0)
	require.NoError(t, err)
	fill(t, s)
	require.NoError(t, s.(*boltShard).db.View(func(tx *bolt.Tx) error {
		require.Equal(t, u64Key(openFormat), tx.Bucket(bucketMeta).Get(keyFormat))
		return nil
	}))

	// A snapshot of a newer format does not replace a shard.
	setFormat(t, s, ShardFormat+1)
	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	dst, err := e.Open("db2", 1)
	require.NoError(t, err)
	apply(t, dst, 1, pt("kept", "", "value", 1, 1))
	err = dst.Restore(bytes.NewReader(snap.Bytes()))
	require.ErrorIs(t, err, ErrNewerShardFormat)
	require.ErrorIs(t, err, ErrBadSnapshot)
	got, err := dst.Query("kept", nil, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "the refused snapshot changed the shard")

	// Reopened by this engine, the newer file is refused, naming both
	// versions; nothing in it changes.
	require.NoError(t, e.Close())
	e2, err := NewBoltEngine(dir)
	require.NoError(t, err)
	defer e2.Close()
	_, err = e2.Open("db1", 0)
	require.ErrorIs(t, err, ErrNewerShardFormat)
	require.ErrorContains(t, err, "format 5; this cairn reads format 4 and older")

	// An unmarked file (0.1.0's) opens and gets the mark.
	s3, err := e2.Open("db2", 1)
	require.NoError(t, err)
	require.NoError(t, s3.(*boltShard).db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Delete(keyFormat)
	}))
	require.NoError(t, e2.Close())
	e3 := newEngine(t, dir)
	s4, err := e3.Open("db2", 1)
	require.NoError(t, err)
	require.NoError(t, s4.(*boltShard).db.View(func(tx *bolt.Tx) error {
		require.Equal(t, u64Key(openFormat), tx.Bucket(bucketMeta).Get(keyFormat))
		return nil
	}))
}
