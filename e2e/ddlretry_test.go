package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCreateDatabaseStalledEtcd: a create sent while the etcd process is
// frozen (SIGSTOP) cannot know whether etcd will apply it: the answer is 503
// outcome_unknown saying it is safe to retry, never "nothing changed". After
// etcd resumes, retrying the same create answers 201 with the one database
// that exists (its uid stable across retries); a different definition under
// the same name stays 409.
func TestCreateDatabaseStalledEtcd(t *testing.T) {
	e := startEtcd(t)
	e.waitStatus("/api/v1/health", 200, 15*time.Second)
	// A long lease: the freeze must not also expire the storage node.
	n := start(t, "--role", "master,broker,storage", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-endpoints", e.clientURL, "--lease-ttl", "30s", "--log-format", "json")
	id := nodeID(t, n)
	masterIs(t, n, id, 15*time.Second)
	require.Eventually(t, func() bool {
		code, _ := n.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
		return code == 201
	}, 15*time.Second, 50*time.Millisecond, "storage cluster never created")
	require.Eventually(t, func() bool {
		code, c := n.get("/api/v1/storage-clusters/default")
		return code == 200 && containsNode(c["nodes"], id)
	}, 15*time.Second, 20*time.Millisecond, "the storage node never showed up live")

	db := map[string]any{"name": "stalled", "num_shards": 2, "replica_factor": 1}
	n.client = &http.Client{Timeout: 30 * time.Second} // longer than the broker's etcd timeout
	frozen := true
	e.stop()
	t.Cleanup(func() {
		if frozen {
			e.cont()
		}
	})
	code, body := n.post("/api/v1/databases", db)
	e.cont()
	frozen = false
	require.Equal(t, 503, code, "create while etcd is frozen: %v", body)
	env, _ := body["error"].(map[string]any)
	require.Equal(t, "outcome_unknown", env["code"], "%v", body)
	msg, _ := env["message"].(string)
	t.Logf("answer while etcd was frozen: %s", msg)
	require.Contains(t, msg, "safe to retry")
	require.NotContains(t, msg, "nothing changed")

	var created map[string]any
	require.Eventually(t, func() bool {
		code, created = n.post("/api/v1/databases", db)
		return code == 201
	}, 30*time.Second, 100*time.Millisecond, "the retried create never succeeded (last %v)", created)
	uid, _ := created["uid"].(string)
	require.NotEmpty(t, uid)
	require.Equal(t, "stalled", created["name"])
	require.EqualValues(t, 2, created["num_shards"])

	// Retried again once the broker's state shows the database: same answer.
	require.Eventually(t, func() bool {
		code, _ := n.get("/api/v1/databases/stalled")
		return code == 200
	}, 15*time.Second, 20*time.Millisecond)
	code, again := n.post("/api/v1/databases", db)
	require.Equal(t, 201, code, "%v", again)
	require.Equal(t, uid, again["uid"], "a retry must answer with the existing database, not a new incarnation")
	code, got := n.get("/api/v1/databases/stalled")
	require.Equal(t, 200, code)
	require.Equal(t, uid, got["uid"])

	code, body = n.post("/api/v1/databases", map[string]any{"name": "stalled", "num_shards": 3, "replica_factor": 1})
	require.Equal(t, 409, code, "a different definition under the same name: %v", body)

	keys := etcdSnapshot(t, e.clientURL, "/cairn/database/config/")
	require.Len(t, keys, 1, "exactly one database in etcd: %v", keys)
	require.Contains(t, keys, "/cairn/database/config/stalled")
}
