package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A new leader whose watched view of the live nodes lacks an assigned
// replica reads that replica's record instead of taking it for dead: the
// view is one watch among several, and a node that registered just before
// this one took up its shards may not have come through it yet. Leading
// from a stale view left a new RF 3 database's shards with the leader alone
// in sync until the others rejoined, and a leader killed in that window
// took its shards offline. L's view holds L and F; G is live in etcd but
// not in the view; H is neither: L's first set is {L, F, G}.
func TestFirstSetReadsReplicasMissingFromTheView(t *testing.T) {
	b := startBatchHost(t, 1)
	_, err := b.store.Put(b.ctx, b.ck.Node("G"), []byte(`{"node_id":"G","node_address":"127.0.0.1:3"}`), 0)
	require.NoError(t, err)
	b.assign("L", "F", "G", "H")
	b.lead(1)
	require.Eventually(t, func() bool { return len(b.set(0).Replicas) > 0 }, 10*time.Second, 10*time.Millisecond,
		"the leadership recorded its first set")
	require.Equal(t, []string{"L", "F", "G"}, b.set(0).Replicas)
}
