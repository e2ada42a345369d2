package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdMember is a `--role etcd` process and its client URL.
type etcdMember struct {
	*Proc
	clientURL string
}

// startEtcd starts a single-member etcd node on free ports.
func startEtcd(t testing.TB) etcdMember {
	client := freeURL(t)
	p := start(t, "--role", "etcd", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", client, "--etcd-listen-peer-url", freeURL(t), "--log-format", "json")
	return etcdMember{Proc: p, clientURL: client}
}

// startNode starts a node without the etcd role against the given endpoints.
func startNode(t testing.TB, roles, endpoints string, extra ...string) *Proc {
	return start(t, append([]string{"--role", roles, "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-endpoints", endpoints, "--lease-ttl", "2s", "--log-format", "json"}, extra...)...)
}

// nodeID asks a node for its id.
func nodeID(t testing.TB, p *Proc) string {
	t.Helper()
	h := p.waitStatus("/api/v1/health", 200, 10*time.Second)
	id, _ := h["node_id"].(string)
	require.NotEmpty(t, id)
	return id
}

func isMaster(p *Proc) bool {
	code, h := p.get("/api/v1/health")
	return code == 200 && h["is_master"] == true
}

// masterIs waits until p's /api/v1/master names id and returns the record.
func masterIs(t testing.TB, p *Proc, id string, within time.Duration) map[string]any {
	t.Helper()
	var rec map[string]any
	require.Eventually(t, func() bool {
		var code int
		code, rec = p.get("/api/v1/master")
		return code == 200 && rec["node_id"] == id
	}, within, 20*time.Millisecond, "%s: master never named %s (last %v)", p.name, id, rec)
	return rec
}

// etcdMaster reads the master key straight from etcd: the record and its
// create revision (the term).
func etcdMaster(t testing.TB, endpoint string) (rec map[string]any, term int64) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/cairn/master/node")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "no master key in etcd")
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &rec))
	return rec, resp.Kvs[0].CreateRevision
}

// TestElection: two master candidates, exactly one master; kill -9 moves the
// term within lease TTL + 1 s; a frozen master is deposed and, resumed,
// neither believes it is master nor overwrites the new record.
func TestElection(t *testing.T) {
	e := startEtcd(t)
	e.waitStatus("/api/v1/health", 200, 15*time.Second)
	a := startNode(t, "master", e.clientURL)
	b := startNode(t, "master", e.clientURL)
	ids := map[*Proc]string{a: nodeID(t, a), b: nodeID(t, b)}

	var first, second *Proc
	require.Eventually(t, func() bool {
		am, bm := isMaster(a), isMaster(b)
		switch {
		case am && !bm:
			first, second = a, b
		case bm && !am:
			first, second = b, a
		default:
			return false
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "never exactly one master")
	rec1 := masterIs(t, first, ids[first], 5*time.Second)
	masterIs(t, second, ids[first], 5*time.Second)
	require.False(t, isMaster(second), "two masters at once")
	term1 := rec1["term"].(float64)

	// kill -9: nothing resigns, the lease has to expire.
	killed := time.Now()
	first.kill9()
	require.Eventually(t, func() bool { return isMaster(second) }, 6*time.Second, 10*time.Millisecond)
	took := time.Since(killed)
	t.Logf("failover after kill -9: %s (lease TTL 2s)", took)
	require.LessOrEqual(t, took, 3*time.Second, "failover must take at most lease TTL + 1 s")
	rec2 := masterIs(t, second, ids[second], 5*time.Second)
	term2 := rec2["term"].(float64)
	require.Greater(t, term2, term1)

	// Bring the killed candidate back (same data dir: same node id), then
	// freeze the master past its lease.
	first.restart()
	require.Equal(t, ids[first], nodeID(t, first))
	masterIs(t, first, ids[second], 10*time.Second)
	second.stop()
	stopped := true
	t.Cleanup(func() {
		if stopped {
			second.cont()
		}
	})
	rec3 := masterIs(t, first, ids[first], 10*time.Second)
	require.Eventually(t, func() bool { return isMaster(first) }, 5*time.Second, 20*time.Millisecond)
	term3 := rec3["term"].(float64)
	require.Greater(t, term3, term2)

	second.cont()
	stopped = false
	require.Eventually(t, func() bool {
		code, h := second.get("/api/v1/health")
		return code == 200 && h["is_master"] == false
	}, 10*time.Second, 20*time.Millisecond, "resumed old master still claims the term")
	// Its view converges on the new master, and the key in etcd is still the
	// new master's: the resumed process wrote nothing over it.
	rec := masterIs(t, second, ids[first], 10*time.Second)
	require.Equal(t, term3, rec["term"])
	rec = masterIs(t, first, ids[first], time.Second)
	require.Equal(t, term3, rec["term"])
	inEtcd, rev := etcdMaster(t, e.clientURL)
	require.Equal(t, ids[first], inEtcd["node_id"])
	require.Equal(t, int64(term3), rev)
	require.True(t, isMaster(first))
	require.False(t, isMaster(second))
}
