package master

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// txnCounter counts the txns that reach etcd.
type txnCounter struct {
	*kv.EtcdStore
	txns atomic.Int64
}

func (s *txnCounter) Txn(ctx context.Context, cmps []kv.Cmp, ops []kv.Op) (bool, int64, error) {
	s.txns.Add(1)
	return s.EtcdStore.Txn(ctx, cmps, ops)
}

// The release of a batch whose lock txn failed (it timed out, or a lock was
// held by another orchestrator) deletes the locks that hold the batch's
// token, and only those, in one read and one txn after its refused chunk
// txn: 2 txns for a chunk of 100 keys of which 3 are ours, one is another
// orchestrator's and the rest were never taken. It took one txn per key
// after the refused chunk (101), in a row, each up to the request timeout
// on a loaded etcd.
func TestReleaseLocksOfAFailedLockTxn(t *testing.T) {
	ctx := context.Background()
	store := &txnCounter{EtcdStore: etcdtest.Start(t).Store(t)}
	keys := models.Keys{NS: "/cairn"}
	m := &Master{cfg: Config{Store: store, Keys: keys}, lg: zap.NewNop()}
	token, other := []byte("n1/7/1"), []byte("n0/6/1")
	var chunk []string
	for i := range maxTxnOps {
		chunk = append(chunk, keys.FailoverLock(fmt.Sprintf("db%02d", i)))
	}
	for _, i := range []int{0, 41, 99} {
		_, err := store.Put(ctx, chunk[i], token, 0)
		require.NoError(t, err)
	}
	_, err := store.Put(ctx, chunk[50], other, 0)
	require.NoError(t, err)

	m.releaseLocks(ctx, token, chunk)
	left, _, err := store.List(ctx, keys.NS+"/failover/")
	require.NoError(t, err)
	require.Len(t, left, 1, "only the other orchestrator's lock is left")
	require.Equal(t, chunk[50], left[0].Key)
	require.Equal(t, other, left[0].Value)
	require.Equal(t, int64(2), store.txns.Load(), "the chunk's txn, refused, then one txn for the three locks that hold the token")
}
