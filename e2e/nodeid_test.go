package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// argOf is the value of flag name in a process's arguments ("" if absent).
func (p *Proc) argOf(name string) string {
	i := slices.Index(p.args, name)
	if i < 0 || i+1 >= len(p.args) {
		return ""
	}
	return p.args[i+1]
}

// storageAddrOf is the address the broker's /nodes shows for a storage node
// id in cluster "default" ("" when it is not live).
func storageAddrOf(p *Proc, id string) string {
	var nodes struct {
		Storage map[string][]struct {
			NodeID      string `json:"node_id"`
			NodeAddress string `json:"node_address"`
		} `json:"storage"`
	}
	if getDataJSON(p, "/api/v1/nodes", &nodes) != 200 {
		return ""
	}
	for _, n := range nodes.Storage["default"] {
		if n.NodeID == id {
			return n.NodeAddress
		}
	}
	return ""
}

// TestNodeIDCopyRefused (issue 8 #1): a copy of a storage node's data dir
// started elsewhere while the original runs exits non-zero, naming the node
// id and the live holder's address, without taking the record or a shard;
// the original keeps serving. The original restarted at once after kill -9
// (same address, its old lease still alive) takes its own record back. Once
// the original is gone, the copy (a moved node) started at once waits for the
// original's lease to expire, and starts.
func TestNodeIDCopyRefused(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 1, shards: 2, rf: 1})
	orig, id := c.storage[0], c.ids[0]
	endpoint := c.broker.argOf("--etcd-listen-client-url")
	writeURL := fmt.Sprintf("http://%s/api/v1/write?db=%s&precision=ms", c.broker.addr, c.db)
	write := func(n int) {
		t.Helper()
		var code int
		var msg string
		require.Eventually(t, func() bool {
			var err error
			code, msg, err = postData(c.broker.client, writeURL, []byte(fmt.Sprintf("m,k=v%d value=%d %d\n", n, n, 1000+n)))
			return err == nil && code == 204
		}, 20*time.Second, 50*time.Millisecond, "write %d never acknowledged: %d %s", n, code, msg)
	}
	write(1)

	copyDir := t.TempDir()
	out, err := exec.Command("cp", "-a", orig.argOf("--data-dir")+"/.", copyDir).CombinedOutput()
	require.NoError(t, err, "copy data dir: %s", out)
	dup := start(t, "--role", "storage", "--data-dir", copyDir, "--http-addr", freeAddr(t),
		"--etcd-endpoints", endpoint, "--lease-ttl", "2s", "--log-format", "json")
	code := dup.wait(30 * time.Second)
	require.NotEqual(t, 0, code, "the copy must refuse to run")
	logText, err := os.ReadFile(dup.log)
	require.NoError(t, err)
	t.Logf("the copy exited %d: %s", code, tail(dup.log, 1))
	require.Contains(t, string(logText), id, "the refusal names the node id")
	require.Contains(t, string(logText), orig.addr, "the refusal names the live holder's address")
	require.NotContains(t, string(logText), `"msg":"registered"`, "the copy registered nothing")
	require.NotContains(t, string(logText), `"msg":"serving shard"`, "the copy hosted no shard")
	require.Equal(t, orig.addr, storageAddrOf(c.broker, id), "the record still names the original")
	write(2)
	code, _ = orig.get("/api/v1/health")
	require.Equal(t, 200, code)

	// Same node, same address, restarted within the TTL: it starts.
	orig.kill9()
	orig.restart()
	orig.waitStatus("/api/v1/ready", 200, 20*time.Second)
	require.Eventually(t, func() bool { return storageAddrOf(c.broker, id) == orig.addr }, 20*time.Second, 50*time.Millisecond,
		"the restarted node's record never showed up")
	c.waitHealthy(30 * time.Second)
	write(3)

	// A moved node started right after the original died: it waits for the
	// dead holder's lease to expire, then starts.
	orig.kill9()
	dup.restart()
	dup.waitStatus("/api/v1/ready", 200, 20*time.Second)
	require.Eventually(t, func() bool { return storageAddrOf(c.broker, id) == dup.addr }, 20*time.Second, 50*time.Millisecond,
		"the moved node's record never showed up")
	require.True(t, dup.running())
	c.waitHealthy(30 * time.Second)
	write(4)
}
