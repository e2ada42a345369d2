package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// metricsText is GET /metrics of p ("" when it does not answer).
func metricsText(p *Proc) string {
	resp, err := p.client.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// TestEtcdNoSpace: a standalone node whose embedded etcd has a small quota
// (--etcd-quota-backend-bytes) is filled until etcd raises its NOSPACE alarm.
// DDL then answers 503 etcd_nospace saying what to do, /ready stays 200 but
// shows the node degraded, /metrics shows the alarm, and data writes and
// queries keep working. Once an operator frees space and disarms the alarm,
// DDL works again and the degradation clears.
func TestEtcdNoSpace(t *testing.T) {
	client := freeURL(t)
	p := start(t, "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", client, "--etcd-listen-peer-url", freeURL(t), "--log-format", "json",
		"--etcd-quota-backend-bytes", fmt.Sprint(8<<20))
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	id := nodeID(t, p)
	require.Eventually(t, func() bool {
		code, c := p.get("/api/v1/storage-clusters/default")
		return code == 200 && containsNode(c["nodes"], id)
	}, 15*time.Second, 20*time.Millisecond, "the standalone storage node never showed up live")
	code, body := p.post("/api/v1/databases", map[string]any{"name": "m", "num_shards": 2, "replica_factor": 1})
	require.Equal(t, 201, code, "create database: %v", body)
	c := &dataCluster{t: t, broker: p, etcd: p, db: "m", rf: 1, shards: 2}
	c.waitHealthy(30 * time.Second)
	require.Contains(t, metricsText(p), `cairn_etcd_alarm{type="nospace"} 0`)

	writeURL := fmt.Sprintf("http://%s/api/v1/write?db=m", p.addr)
	hc := &http.Client{Timeout: 20 * time.Second}
	line := func(i int) []byte { return fmt.Appendf(nil, "cpu,host=h%d value=%d %d\n", i, i, dataBase+int64(i)) }
	status, msg, err := postData(hc, writeURL, line(1))
	require.NoError(t, err)
	require.Equal(t, 204, status, msg)

	// Fill etcd with large values until it refuses a write for lack of space.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	filler := strings.Repeat("x", 512<<10)
	full := false
	for i := 0; i < 100 && !full; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/filler/%03d", i), filler)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) {
			full = true
			break
		}
		require.NoError(t, err, "filling etcd, put %d", i)
	}
	require.True(t, full, "etcd never ran out of space with an 8 MiB quota")

	// DDL: 503 with its own code and what to do, nothing changed.
	code, body = p.post("/api/v1/databases", map[string]any{"name": "late", "num_shards": 1, "replica_factor": 1})
	require.Equal(t, 503, code, "create database under NOSPACE: %v", body)
	env, _ := body["error"].(map[string]any)
	require.Equal(t, "etcd_nospace", env["code"], "%v", body)
	msgText, _ := env["message"].(string)
	for _, hint := range []string{"nothing changed", "compact", "defrag", "--etcd-quota-backend-bytes", "etcdctl alarm disarm"} {
		require.Contains(t, msgText, hint)
	}
	code, _ = p.get("/api/v1/databases/late")
	require.Equal(t, 404, code)

	// Ready: still 200 (reads and writes are served), but degraded.
	var ready map[string]any
	require.Eventually(t, func() bool {
		var code int
		code, ready = p.get("/api/v1/ready")
		return code == 200 && ready["status"] == "degraded"
	}, 10*time.Second, 50*time.Millisecond, "ready never showed the NOSPACE alarm: %v", ready)
	require.Contains(t, fmt.Sprint(ready["degraded"]), "etcd_nospace")
	require.Eventually(t, func() bool {
		return strings.Contains(metricsText(p), `cairn_etcd_alarm{type="nospace"} 1`)
	}, 10*time.Second, 50*time.Millisecond, "the alarm gauge never rose")

	// The data plane does not need etcd: writes are acknowledged and read back.
	for i := 2; i <= 20; i++ {
		status, msg, err := postData(hc, writeURL, line(i))
		require.NoError(t, err)
		require.Equal(t, 204, status, "write %d under NOSPACE: %s", i, msg)
	}
	res := c.queryAll("cpu", 20*time.Second)
	require.Len(t, res.Series, 20, "every series written before and under NOSPACE reads back")

	// The operator's way out: free space, compact, defragment, disarm.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del, err := cli.Delete(ctx, "/filler/", clientv3.WithPrefix())
	require.NoError(t, err)
	_, err = cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	_, err = cli.Defragment(ctx, client)
	require.NoError(t, err)
	_, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		code, _ := p.post("/api/v1/databases", map[string]any{"name": "late", "num_shards": 1, "replica_factor": 1})
		return code == 201
	}, 15*time.Second, 100*time.Millisecond, "DDL never worked again after the alarm was disarmed")
	require.Eventually(t, func() bool {
		code, r := p.get("/api/v1/ready")
		_, degraded := r["degraded"]
		return code == 200 && !degraded && strings.Contains(metricsText(p), `cairn_etcd_alarm{type="nospace"} 0`)
	}, 10*time.Second, 50*time.Millisecond, "the degradation never cleared")
}
