package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEtcdDown: a broker keeps serving its local state while etcd is down,
// restarts from its state.backup while etcd is still down, and converges
// without a restart once etcd is back.
func TestEtcdDown(t *testing.T) {
	e := startEtcd(t)
	e.waitStatus("/api/v1/health", 200, 15*time.Second)
	b := startNode(t, "master,broker", e.clientURL)
	id := nodeID(t, b)
	b.waitStatus("/api/v1/ready", 200, 10*time.Second)
	before := masterIs(t, b, id, 10*time.Second)

	// A storage node in cluster "default", so the broker can create a
	// database once etcd is back (a database needs live storage nodes).
	code, _ := b.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
	require.Equal(t, 201, code)
	s := startNode(t, "storage", e.clientURL)
	sid := nodeID(t, s)
	require.Eventually(t, func() bool {
		code, c := b.get("/api/v1/storage-clusters/default")
		return code == 200 && containsNode(c["nodes"], sid)
	}, 10*time.Second, 20*time.Millisecond, "storage node never showed up live")

	e.kill9()

	// Reads keep working from the local copy; /ready notices etcd is down.
	require.Eventually(t, func() bool {
		code, r := b.get("/api/v1/ready")
		return code == 200 && r["etcd"] == "down"
	}, 10*time.Second, 50*time.Millisecond, "ready never reported etcd down")
	code, rec := b.get("/api/v1/master")
	require.Equal(t, 200, code)
	require.Equal(t, before, rec, "last known master while etcd is down")
	code, ex := b.get("/api/v1/explore")
	require.Equal(t, 200, code)
	require.NotNil(t, ex["storage_clusters"])
	require.Contains(t, ex["storage_clusters"], "default")

	// Changes are refused, not queued or lost: 503, retry later.
	code, _ = b.post("/api/v1/storage-clusters", map[string]any{"name": "during_outage"})
	require.Equal(t, 503, code)
	// The refused change and the etcd probes show in the error metric.
	waitMetric(t, b, 10*time.Second, above(0), "> 0", "cairn_etcd_request_errors_total")

	// Restart the broker with etcd still down: it serves from state.backup.
	t.Logf("broker SIGTERM to exit with etcd down: %s", b.term())
	b.restart()
	ready := b.waitStatus("/api/v1/ready", 200, 10*time.Second)
	require.Equal(t, true, ready["from_backup"], "ready: %v", ready)
	// The etcd probe needs a round to notice the outage after a start.
	require.Eventually(t, func() bool {
		code, r := b.get("/api/v1/ready")
		return code == 200 && r["etcd"] == "down" && r["from_backup"] == true
	}, 5*time.Second, 50*time.Millisecond, "restarted broker never reported etcd down")
	code, rec = b.get("/api/v1/master")
	require.Equal(t, 200, code)
	require.Equal(t, before, rec, "master record from the backup")

	// etcd back, same data dir and URLs: the broker converges by itself.
	e.restart()
	require.Eventually(t, func() bool {
		code, r := b.get("/api/v1/ready")
		return code == 200 && r["from_backup"] == false && r["etcd"] == "up"
	}, 15*time.Second, 50*time.Millisecond, "broker never left its backup state")
	// The old term's lease is orphaned (its holder was stopped while etcd was
	// down), so the restarted candidate wins a new, higher term.
	require.Eventually(t, func() bool {
		code, r := b.get("/api/v1/master")
		return code == 200 && r["node_id"] == id && r["term"].(float64) > before["term"].(float64)
	}, 15*time.Second, 50*time.Millisecond, "master never re-elected")
	require.Eventually(t, func() bool { return isMaster(b) }, 5*time.Second, 20*time.Millisecond)

	require.Eventually(t, func() bool {
		code, _ := b.post("/api/v1/databases", map[string]any{"name": "after_outage", "num_shards": 2, "replica_factor": 1})
		// 409: an earlier attempt was written but its answer was lost.
		return code == 201 || code == 409
	}, 15*time.Second, 100*time.Millisecond, "database create never succeeded after etcd returned")
	require.Eventually(t, func() bool {
		code, body := b.get("/api/v1/databases")
		return code == 200 && containsName(body["databases"], "after_outage")
	}, 5*time.Second, 20*time.Millisecond, "new database not listed")
	code, _ = b.get("/api/v1/storage-clusters/during_outage")
	require.Equal(t, 404, code, "a change refused during the outage must not appear later")
}

// containsNode reports whether a list of node records holds node_id id.
func containsNode(list any, id string) bool {
	return containsField(list, "node_id", id)
}

// containsName reports whether a list of objects holds one named name.
func containsName(list any, name string) bool {
	return containsField(list, "name", name)
}

func containsField(list any, field, value string) bool {
	items, _ := list.([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m[field] == value {
			return true
		}
	}
	return false
}
