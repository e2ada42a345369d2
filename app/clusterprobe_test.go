package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv/embedded"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// A storage cluster on an etcd of its own whose etcd stops answering is a
// critical cluster_etcd_down problem naming the cluster and its endpoints,
// and cairn_cluster_etcd_up{cluster} drops to 0; once the etcd answers
// again both clear, without a restart of the node.
func TestClusterEtcdDownIsAProblem(t *testing.T) {
	cfg := config.Default()
	cfg.EtcdListenClientURL = "http://" + freeAddr(t)
	cfg.EtcdListenPeerURL = "http://" + freeAddr(t)
	core := startApp(t, cfg)
	c := &testCluster{t: t, core: core}

	// The second etcd, restartable on the same URLs and dir.
	ecfg := embedded.Config{Name: "far", Dir: t.TempDir() + "/etcd", ListenClientURL: fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t)),
		ListenPeerURL: fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t)), Logger: zap.NewNop(), StartTimeout: 20 * time.Second}
	far, err := embedded.Start(ecfg)
	require.NoError(t, err)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		far.Close(ctx)
	}
	t.Cleanup(func() { stop() })

	body, _ := json.Marshal(map[string]any{"name": "far", "etcd_endpoints": []string{ecfg.ListenClientURL}})
	code, out := c.do(core, http.MethodPost, "/api/v1/storage-clusters", body)
	require.Equal(t, http.StatusCreated, code, string(out))
	gauge := `cairn_cluster_etcd_up{cluster="far"} `
	metric := func() string {
		_, out := c.do(core, http.MethodGet, "/metrics", nil)
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, gauge); ok {
				return v
			}
		}
		return ""
	}
	problem := func() map[string]any {
		var ps struct {
			Problems []map[string]any `json:"problems"`
		}
		if c.getJSON(core, "/api/v1/problems", &ps) != http.StatusOK {
			return nil
		}
		for _, p := range ps.Problems {
			if p["kind"] == "cluster_etcd_down" {
				return p
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return metric() == "1" }, 20*time.Second, 50*time.Millisecond, "the cluster's etcd is probed")
	require.Nil(t, problem())

	stop()
	require.Eventually(t, func() bool { return problem() != nil }, 20*time.Second, 50*time.Millisecond, "cluster_etcd_down listed")
	p := problem()
	require.Equal(t, "critical", p["severity"])
	require.Equal(t, "far", p["cluster"])
	require.Contains(t, p["message"], ecfg.ListenClientURL)
	require.Equal(t, "0", metric())
	// The node's own etcd is fine: not etcd_down.
	var ps struct {
		Problems []map[string]any `json:"problems"`
	}
	require.Equal(t, http.StatusOK, c.getJSON(core, "/api/v1/problems", &ps))
	for _, q := range ps.Problems {
		require.NotEqual(t, "etcd_down", q["kind"])
	}

	// The ports may take a moment to be free again.
	require.Eventually(t, func() bool {
		s, err := embedded.Start(ecfg)
		if err != nil {
			return false
		}
		far = s
		return true
	}, 20*time.Second, 200*time.Millisecond, "the cluster's etcd starts again")
	require.Eventually(t, func() bool { return problem() == nil && metric() == "1" }, 30*time.Second, 50*time.Millisecond,
		"cleared once the etcd answers again")
}
