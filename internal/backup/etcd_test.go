package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

func TestEtcdRoundTripIntoFreshCluster(t *testing.T) {
	ctx := context.Background()
	src := etcdtest.Start(t).Store(t)
	want := seed(t, src, "/cairn")
	var buf bytes.Buffer
	s, err := Backup(ctx, Options{Store: src, Namespace: "/cairn", PageSize: 7}, &buf)
	require.NoError(t, err)
	require.Equal(t, len(want), s.Keys)
	require.Positive(t, s.Revision)

	var hdr header
	require.NoError(t, json.Unmarshal(buf.Bytes(), &hdr))
	require.Equal(t, s.Revision, hdr.Revision)
	require.Equal(t, []string{"east"}, hdr.ExternalClusters)

	dst := etcdtest.Start(t).Store(t)
	rs, err := Restore(ctx, Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(buf.Bytes()), false)
	require.NoError(t, err)
	require.Equal(t, len(want), rs.Keys)
	got := dump(t, dst, "/cairn")
	requireSame(t, want, got)
	for _, k := range []string{"master/node", "live/brokers/b1", "storage/default/live/nodes/n1", "failover/db00/1", "failover/db01/0"} {
		require.NotContains(t, got, k)
	}
	// Nothing leaked outside the namespace either.
	all, _, err := dst.List(ctx, "/")
	require.NoError(t, err)
	require.Len(t, all, len(want))
}

// racingStore changes the namespace right after the backup's first page, as a
// live cluster would; the backup must still be the namespace at one revision.
type racingStore struct {
	kv.Store
	once   sync.Once
	change func()
}

func (r *racingStore) ListAt(ctx context.Context, prefix, after string, rev int64, limit int) ([]kv.KeyValue, int64, error) {
	kvs, got, err := r.Store.ListAt(ctx, prefix, after, rev, limit)
	if prefix == "/cairn/" {
		r.once.Do(r.change)
	}
	return kvs, got, err
}

func TestBackupIsOneRevision(t *testing.T) {
	ctx := context.Background()
	for name, store := range map[string]kv.Store{
		"etcd": etcdtest.Start(t).Store(t), "memory": kv.NewMemoryStore(),
	} {
		t.Run(name, func(t *testing.T) {
			want := seed(t, store, "/cairn")
			rs := &racingStore{Store: store, change: func() {
				_, err := store.Put(ctx, "/cairn/database/config/zzz", []byte(`{"name":"zzz"}`), 0)
				require.NoError(t, err)
				_, err = store.Delete(ctx, "/cairn/state/shards/db11")
				require.NoError(t, err)
				_, err = store.Put(ctx, "/cairn/drain/n3", []byte(`{"node_id":"n3","since":1}`), 0)
				require.NoError(t, err)
			}}
			data := backupBytes(t, Options{Store: rs, Namespace: "/cairn", PageSize: 5})
			dst := kv.NewMemoryStore()
			_, err := Restore(ctx, Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(data), false)
			require.NoError(t, err)
			requireSame(t, want, dump(t, dst, "/cairn"))
		})
	}
}

func TestRestoreRefusesNonEmptyUnlessForced(t *testing.T) {
	ctx := context.Background()
	src := kv.NewMemoryStore()
	want := seed(t, src, "/cairn")
	data := backupBytes(t, Options{Store: src, Namespace: "/cairn"})

	dst := etcdtest.Start(t).Store(t)
	_, err := dst.Put(ctx, "/cairn/database/config/old", []byte(`{"name":"old"}`), 0)
	require.NoError(t, err)
	_, err = dst.Put(ctx, "/cairnx/keep", []byte(`1`), 0)
	require.NoError(t, err)
	before, rev, err := dst.List(ctx, "/")
	require.NoError(t, err)

	o := Options{Store: dst, Namespace: "/cairn"}
	_, err = Restore(ctx, o, bytes.NewReader(data), false)
	require.ErrorIs(t, err, ErrNotEmpty)
	require.ErrorContains(t, err, "/cairn/database/config/old")
	after, rev2, err := dst.List(ctx, "/")
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, rev, rev2, "a refused restore must not write")

	_, err = Restore(ctx, o, bytes.NewReader(data), true)
	require.NoError(t, err)
	requireSame(t, want, dump(t, dst, "/cairn"))
	kept, err := dst.Get(ctx, "/cairnx/keep")
	require.NoError(t, err)
	require.NotNil(t, kept, "--force deletes only the namespace's keys")
}

func TestCorruptFileWritesNothingToEtcd(t *testing.T) {
	ctx := context.Background()
	src := kv.NewMemoryStore()
	seed(t, src, "/cairn")
	data := backupBytes(t, Options{Store: src, Namespace: "/cairn"})
	dst := etcdtest.Start(t).Store(t)
	_, rev, err := dst.List(ctx, "/")
	require.NoError(t, err)
	for _, cut := range []int{1, 100, len(data) / 2, len(data) - 40, len(data) - 3} {
		_, err := Restore(ctx, Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(data[:cut]), true)
		require.ErrorIs(t, err, ErrCorrupt, "cut at %d", cut)
	}
	for _, pos := range []int{0, 30, len(data) / 3, len(data) - 70, len(data) - 2} {
		b := bytes.Clone(data)
		b[pos] ^= 0x20
		_, err := Restore(ctx, Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(b), true)
		require.ErrorIs(t, err, ErrCorrupt, "byte %d flipped", pos)
	}
	all, rev2, err := dst.List(ctx, "/")
	require.NoError(t, err)
	require.Empty(t, all)
	require.Equal(t, rev, rev2)
}
