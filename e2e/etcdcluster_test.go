package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdLeader returns the index of the member that leads the etcd cluster.
func etcdLeader(t testing.TB, clientURLs []string) int {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: clientURLs, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for i, u := range clientURLs {
		st, err := cli.Status(ctx, u)
		require.NoError(t, err)
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	require.FailNow(t, "no etcd leader")
	return -1
}

// TestEtcdCluster: three etcd members found one cluster; losing one (its
// leader, the worst case) leaves the broker and master working.
func TestEtcdCluster(t *testing.T) {
	const n = 3
	peers, clients, initial := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		peers[i], clients[i] = freeURL(t), freeURL(t)
		initial[i] = fmt.Sprintf("e%d=%s", i, peers[i])
	}
	// Started together: each member waits for a quorum of the others.
	members := make([]*Proc, n)
	for i := range n {
		members[i] = start(t, "--role", "etcd", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--etcd-name", fmt.Sprintf("e%d", i), "--etcd-listen-client-url", clients[i], "--etcd-listen-peer-url", peers[i],
			"--etcd-initial-cluster", strings.Join(initial, ","), "--etcd-cluster-state", "new", "--log-format", "json")
	}
	for _, m := range members {
		m.waitStatus("/api/v1/health", 200, 20*time.Second)
	}

	b := startNode(t, "master,broker", strings.Join(clients, ","))
	id := nodeID(t, b)
	b.waitStatus("/api/v1/ready", 200, 10*time.Second)
	masterIs(t, b, id, 10*time.Second)

	leader := etcdLeader(t, clients)
	members[leader].kill9()

	require.Eventually(t, func() bool {
		code, _ := b.post("/api/v1/storage-clusters", map[string]any{"name": "c2"})
		// 409: an earlier attempt was written but its answer was lost.
		return code == 201 || code == 409
	}, 15*time.Second, 100*time.Millisecond, "storage cluster create never succeeded with one etcd member down")
	require.Eventually(t, func() bool {
		code, body := b.get("/api/v1/storage-clusters/c2")
		return code == 200 && body["name"] == "c2"
	}, 5*time.Second, 20*time.Millisecond)
	code, body := b.get("/api/v1/storage-clusters")
	require.Equal(t, 200, code)
	require.True(t, containsName(body["storage_clusters"], "c2"), "list: %v", body)
	masterIs(t, b, id, 10*time.Second)
	require.Eventually(t, func() bool { return isMaster(b) }, 10*time.Second, 20*time.Millisecond)
}
