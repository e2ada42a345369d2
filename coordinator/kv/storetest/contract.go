// Package storetest is the contract every kv.Store implementation
// must meet. The etcd store and the in-memory store both run it, so tests
// written against the memory store mean something for etcd.
package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/stretchr/testify/require"
)

// Run runs the contract against stores made by newStore. Each subtest gets a
// fresh prefix, so one backing cluster can serve them all.
func Run(t *testing.T, newStore func(t *testing.T) kv.Store) {
	n := 0
	prefix := func(t *testing.T) string {
		n++
		return fmt.Sprintf("/contract/%s/%d/", t.Name(), n)
	}
	t.Run("PutGetDelete", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		kvp, err := s.Get(ctx, p+"a")
		require.NoError(t, err)
		require.Nil(t, kvp)
		r1, err := s.Put(ctx, p+"a", []byte("1"), 0)
		require.NoError(t, err)
		r2, err := s.Put(ctx, p+"a", []byte("2"), 0)
		require.NoError(t, err)
		require.Greater(t, r2, r1)
		kvp, err = s.Get(ctx, p+"a")
		require.NoError(t, err)
		require.Equal(t, "2", string(kvp.Value))
		require.Equal(t, r1, kvp.CreateRev)
		require.Equal(t, r2, kvp.ModRev)
		ok, err := s.Delete(ctx, p+"a")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.Delete(ctx, p+"a")
		require.NoError(t, err)
		require.False(t, ok)
	})
	t.Run("ListSortedAndPaged", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		for _, k := range []string{"c", "a", "b", "d"} {
			_, err := s.Put(ctx, p+k, []byte(k), 0)
			require.NoError(t, err)
		}
		_, err := s.Put(ctx, p[:len(p)-1]+"x", []byte("outside"), 0)
		require.NoError(t, err)
		kvs, rev, err := s.List(ctx, p)
		require.NoError(t, err)
		require.Equal(t, []string{p + "a", p + "b", p + "c", p + "d"}, keys(kvs))
		page, prev, err := s.ListAt(ctx, p, p+"a", rev, 2)
		require.NoError(t, err)
		require.Equal(t, rev, prev)
		require.Equal(t, []string{p + "b", p + "c"}, keys(page))
		// A later write is invisible at the fixed revision.
		_, err = s.Put(ctx, p+"bb", []byte("late"), 0)
		require.NoError(t, err)
		page, _, err = s.ListAt(ctx, p, p+"a", rev, 2)
		require.NoError(t, err)
		require.Equal(t, []string{p + "b", p + "c"}, keys(page))
		n, err := s.DeletePrefix(ctx, p)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
	})
	t.Run("TxnFencing", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		ok, rev, err := s.Txn(ctx, []kv.Cmp{kv.CreateRevIs(p+"lock", 0)},
			[]kv.Op{kv.OpPut(p+"lock", []byte("me"), 0), kv.OpPut(p+"data", []byte("x"), 0)})
		require.NoError(t, err)
		require.True(t, ok)
		lock, err := s.Get(ctx, p+"lock")
		require.NoError(t, err)
		require.Equal(t, rev, lock.CreateRev)
		data, err := s.Get(ctx, p+"data")
		require.NoError(t, err)
		require.Equal(t, rev, data.ModRev, "all ops of a txn share one revision")
		// Second creator loses.
		ok, _, err = s.Txn(ctx, []kv.Cmp{kv.CreateRevIs(p+"lock", 0)},
			[]kv.Op{kv.OpPut(p+"lock", []byte("other"), 0)})
		require.NoError(t, err)
		require.False(t, ok)
		// A write fenced on the right create revision succeeds, a stale one does not.
		ok, _, err = s.Txn(ctx, []kv.Cmp{kv.CreateRevIs(p+"lock", lock.CreateRev)},
			[]kv.Op{kv.OpPut(p+"data", []byte("y"), 0)})
		require.NoError(t, err)
		require.True(t, ok)
		ok, _, err = s.Txn(ctx, []kv.Cmp{kv.CreateRevIs(p+"lock", lock.CreateRev+100)},
			[]kv.Op{kv.OpPut(p+"data", []byte("z"), 0)})
		require.NoError(t, err)
		require.False(t, ok)
		ok, _, err = s.Txn(ctx, []kv.Cmp{kv.ValueIs(p+"lock", []byte("me"))},
			[]kv.Op{kv.OpDelete(p + "lock")})
		require.NoError(t, err)
		require.True(t, ok)
		data, err = s.Get(ctx, p+"data")
		require.NoError(t, err)
		require.Equal(t, "y", string(data.Value))
	})
	t.Run("LeaseRevokeDeletesKeys", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		id, err := s.Grant(ctx, 2*time.Second)
		require.NoError(t, err)
		_, err = s.Put(ctx, p+"leased", []byte("v"), id)
		require.NoError(t, err)
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done, err := s.KeepAlive(kctx, id)
		require.NoError(t, err)
		require.NoError(t, s.Revoke(ctx, id))
		kvp, err := s.Get(ctx, p+"leased")
		require.NoError(t, err)
		require.Nil(t, kvp)
		require.Eventually(t, func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}, 10*time.Second, 20*time.Millisecond, "keepalive channel closes when the lease is revoked")
		_, err = s.Put(ctx, p+"leased", []byte("v"), id)
		require.ErrorIs(t, err, kv.ErrLeaseNotFound)
	})
	t.Run("LeaseExpiresWithoutKeepAlive", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		id, err := s.Grant(ctx, 2*time.Second)
		require.NoError(t, err)
		_, err = s.Put(ctx, p+"leased", []byte("v"), id)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			kvp, err := s.Get(ctx, p+"leased")
			return err == nil && kvp == nil
		}, 10*time.Second, 50*time.Millisecond)
	})
	t.Run("WatchFromRevision", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		r1, err := s.Put(ctx, p+"a", []byte("1"), 0)
		require.NoError(t, err)
		_, err = s.Put(ctx, p+"b", []byte("2"), 0)
		require.NoError(t, err)
		_, err = s.Delete(ctx, p+"a")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.Watch(wctx, p, r1)
		var got []string
		deadline := time.After(10 * time.Second)
		for len(got) < 3 {
			select {
			case r := <-ch:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					got = append(got, fmt.Sprintf("%d:%s", ev.Type, ev.KV.Key[len(p):]))
				}
			case <-deadline:
				t.Fatalf("watch delivered only %v", got)
			}
		}
		require.Equal(t, []string{"0:a", "0:b", "1:a"}, got)
	})
	t.Run("WatchCompacted", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		r1, err := s.Put(ctx, p+"a", []byte("1"), 0)
		require.NoError(t, err)
		r2, err := s.Put(ctx, p+"a", []byte("2"), 0)
		require.NoError(t, err)
		_, err = s.Put(ctx, p+"a", []byte("3"), 0)
		require.NoError(t, err)
		require.NoError(t, s.Compact(ctx, r2+1))
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		select {
		case r := <-s.Watch(wctx, p, r1):
			require.ErrorIs(t, r.Err, kv.ErrCompacted)
		case <-time.After(10 * time.Second):
			t.Fatal("no compaction error")
		}
		kvp, err := s.Get(ctx, p+"a")
		require.NoError(t, err)
		require.Equal(t, "3", string(kvp.Value), "compaction keeps current values")
	})
	t.Run("ClusterIDStable", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		a, err := s.ClusterID(ctx)
		require.NoError(t, err)
		b, err := s.ClusterID(ctx)
		require.NoError(t, err)
		require.NotZero(t, a)
		require.Equal(t, a, b)
	})
	t.Run("GetMany", func(t *testing.T) {
		s, p, ctx := newStore(t), prefix(t), context.Background()
		g, ok := s.(interface {
			GetMany(ctx context.Context, keys []string) ([]*kv.KeyValue, uint64, error)
		})
		require.True(t, ok, "both stores read several keys in one round trip")
		var ks []string
		revs := map[string]int64{}
		for i := range 250 { // more than one etcd txn's worth
			k := fmt.Sprintf("%sk%03d", p, i)
			ks = append(ks, k)
			if i%3 != 0 {
				rev, err := s.Put(ctx, k, []byte(k), 0)
				require.NoError(t, err)
				revs[k] = rev
			}
		}
		got, cid, err := g.GetMany(ctx, ks)
		require.NoError(t, err)
		want, err := s.ClusterID(ctx)
		require.NoError(t, err)
		require.Equal(t, want, cid)
		require.Len(t, got, len(ks))
		for i, k := range ks {
			if revs[k] == 0 {
				require.Nil(t, got[i], k)
				continue
			}
			require.Equal(t, k, got[i].Key)
			require.Equal(t, k, string(got[i].Value))
			require.Equal(t, revs[k], got[i].ModRev)
			require.Equal(t, revs[k], got[i].CreateRev)
		}
		none, cid, err := g.GetMany(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, none)
		require.Equal(t, want, cid)
	})
}

func keys(kvs []kv.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kvp := range kvs {
		out[i] = kvp.Key
	}
	return out
}
