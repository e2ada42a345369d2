package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteTimeoutDefault: with the default --write-timeout (4 s), a write
// to a database whose shard leader is frozen (its lease, 10 s, keeps it
// "live") answers 503 naming the flag within 4.5 s, under the 5 s timeouts
// of Telegraf and the Influx Go clients; once a shard has no live replica at
// all (its only node killed and its lease gone) the write answers 503 at
// once, naming the node that is down.
func TestWriteTimeoutDefault(t *testing.T) {
	core, endpoint := startCore(t)
	frozen := start(t, "--role", "storage", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-endpoints", endpoint, "--lease-ttl", "10s", "--log-format", "json")
	dead := startNode(t, "storage", endpoint)
	c := &dataCluster{t: t, broker: core, etcd: core, storage: []*Proc{frozen, dead}, db: "db", rf: 1, shards: 4}
	c.ids = []string{nodeID(t, frozen), nodeID(t, dead)}
	require.Eventually(t, func() bool {
		var nodes struct {
			Storage map[string][]any `json:"storage"`
		}
		return getDataJSON(core, "/api/v1/nodes", &nodes) == 200 && len(nodes.Storage["default"]) == 2
	}, 15*time.Second, 20*time.Millisecond, "storage nodes never both live")
	code, body := core.post("/api/v1/databases", map[string]any{"name": "db", "num_shards": 4, "replica_factor": 1})
	require.Equal(t, 201, code, "create database: %v", body)
	c.waitHealthy(30 * time.Second)
	lc := c.leaderCounts()
	require.Positive(t, lc[c.ids[0]], "the 10 s-lease node leads a shard: %v", lc)
	require.Positive(t, lc[c.ids[1]], "the 2 s-lease node leads a shard: %v", lc)

	var batch strings.Builder
	for i := range 40 {
		fmt.Fprintf(&batch, "cpu,host=h%d value=1 %d\n", i, dataBase+int64(i))
	}
	url := fmt.Sprintf("http://%s/api/v1/write?db=db", core.addr)
	hc := &http.Client{Timeout: 30 * time.Second}
	status, msg, err := postData(hc, url, []byte(batch.String()))
	require.NoError(t, err)
	require.Equal(t, 204, status, msg)

	frozen.stop()
	begin := time.Now()
	status, msg, err = postData(hc, url, []byte(batch.String()))
	took := time.Since(begin)
	frozen.cont()
	require.NoError(t, err)
	t.Logf("write with a frozen shard leader: %d after %s: %s", status, took.Round(time.Millisecond), msg)
	require.Equal(t, 503, status, msg)
	require.Contains(t, msg, "no write within --write-timeout 4s")
	require.LessOrEqual(t, took, 4500*time.Millisecond, "the write must answer within 4.5 s")

	dead.kill9()
	require.Eventually(t, func() bool {
		for _, s := range c.shardsOf() {
			if s.Leader == c.ids[1] && s.Status == "offline" {
				return true
			}
		}
		return false
	}, 15*time.Second, 20*time.Millisecond, "the killed node's shards never went offline: %+v", c.shardsOf())
	begin = time.Now()
	status, msg, err = postData(hc, url, []byte(batch.String()))
	took = time.Since(begin)
	require.NoError(t, err)
	t.Logf("write with a shard whose only replica is dead: %d after %s: %s", status, took.Round(time.Millisecond), msg)
	require.Equal(t, 503, status, msg)
	require.Contains(t, msg, "has no live replica ("+c.ids[1]+" down)")
	require.Less(t, took, time.Second, "a shard with no live replica answers at once")
}
