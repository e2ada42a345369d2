package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

// Against a real etcd: two LeaseStream views of one store keep their own
// leases alive, closing one view ends only its keep-alives (its lease then
// expires, the other's does not), and the shared store keeps working.
func TestEtcdStoreLeaseStreams(t *testing.T) {
	s := etcdtest.Start(t).Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := s.LeaseStream(), s.LeaseStream()
	defer b.Close()
	la, err := a.Grant(ctx, 2*time.Second)
	require.NoError(t, err)
	lb, err := b.Grant(ctx, 2*time.Second)
	require.NoError(t, err)
	lostA, err := a.KeepAlive(ctx, la)
	require.NoError(t, err)
	lostB, err := b.KeepAlive(ctx, lb)
	require.NoError(t, err)
	_, err = a.Put(ctx, "/t/a", []byte("a"), la)
	require.NoError(t, err)
	_, err = b.Put(ctx, "/t/b", []byte("b"), lb)
	require.NoError(t, err)

	require.NoError(t, a.Close())
	<-lostA                             // its stream is gone
	require.Eventually(t, func() bool { // and its lease expires
		kvp, err := s.Get(ctx, "/t/a")
		return err == nil && kvp == nil
	}, 30*time.Second, 50*time.Millisecond)
	select {
	case <-lostB:
		t.Fatal("closing one view ended another's keep-alive")
	default:
	}
	kvp, err := s.Get(ctx, "/t/b")
	require.NoError(t, err)
	require.NotNil(t, kvp, "the other view's lease is kept alive")
	_, err = s.Put(ctx, "/t/c", []byte("c"), 0)
	require.NoError(t, err, "the shared connection still serves")
}
