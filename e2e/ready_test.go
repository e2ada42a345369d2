package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadyMeansServing (issue 8 #7): on a fresh standalone node, the first
// 200 of /api/v1/ready means every role serves: a database with replica
// factor 1 created right after it succeeds (it used to get 422 "0 live
// storage nodes"). Repeated on fresh nodes, as the race is a timing one.
func TestReadyMeansServing(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := start(t, standaloneArgs(t)...)
			p.waitStatus("/api/v1/ready", 200, 20*time.Second)
			code, body := p.post("/api/v1/databases", map[string]any{"name": "first", "num_shards": 2, "replica_factor": 1})
			require.Equal(t, 201, code, "create database right after ready: %v", body)
			p.term()
		})
	}
}

// TestReadyNamesWhatItWaitsFor: a storage node whose storage cluster is not
// configured is not ready, and says why; it becomes ready once the cluster
// exists and its record is live.
func TestReadyNamesWhatItWaitsFor(t *testing.T) {
	e := startEtcd(t)
	e.waitStatus("/api/v1/health", 200, 15*time.Second)
	b := startNode(t, "master,broker", e.clientURL)
	b.waitStatus("/api/v1/ready", 200, 15*time.Second)
	s := startNode(t, "storage", e.clientURL)
	var body map[string]any
	require.Eventually(t, func() bool {
		var code int
		code, body = s.get("/api/v1/ready")
		return code == 503 && body["waiting_for"] == `storage cluster "default" is not configured yet`
	}, 15*time.Second, 20*time.Millisecond, "storage node without a cluster: %v", body)
	code, _ := b.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
	require.Equal(t, 201, code)
	s.waitStatus("/api/v1/ready", 200, 15*time.Second)
}
