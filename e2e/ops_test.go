package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startEtcdOn starts a single-member etcd node at fixed client and peer URLs
// with an empty data dir, so a second call at the same URLs founds a new
// cluster where the first one was (a lost etcd replaced by a fresh one).
func startEtcdOn(t testing.TB, clientURL, peerURL string) etcdMember {
	p := start(t, "--role", "etcd", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", clientURL, "--etcd-listen-peer-url", peerURL, "--log-format", "json")
	return etcdMember{Proc: p, clientURL: clientURL}
}

// dataDirArg is the --data-dir a process was started with.
func (p *Proc) dataDirArg() string {
	i := slices.Index(p.args, "--data-dir")
	if i < 0 || i+1 >= len(p.args) {
		return ""
	}
	return p.args[i+1]
}

// restoreShard is the part of a shard's record that a restore must bring back
// exactly. The in-sync set is left out: it is rebuilt by replication.
type restoreShard struct {
	ID       int
	Replicas []string // sorted: placement is a set
	Leader   string
	Term     float64
	Status   string
	inSync   bool // the in-sync set equals the replicas
}

// readShards reads GET /api/v1/databases/{db}/shards; nil when it did not answer 200.
func readShards(p *Proc, db string) []restoreShard {
	code, body := p.get("/api/v1/databases/" + db + "/shards")
	if code != 200 {
		return nil
	}
	list, _ := body["shards"].([]any)
	out := make([]restoreShard, 0, len(list))
	for _, it := range list {
		m, _ := it.(map[string]any)
		s := restoreShard{Replicas: sortedStrings(m["replicas"])}
		id, _ := m["id"].(float64)
		s.ID = int(id)
		s.Leader, _ = m["leader"].(string)
		s.Term, _ = m["term"].(float64)
		s.Status, _ = m["status"].(string)
		s.inSync = slices.Equal(s.Replicas, sortedStrings(m["isr"]))
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b restoreShard) int { return a.ID - b.ID })
	return out
}

// sortedStrings turns a JSON array of strings into a sorted slice.
func sortedStrings(v any) []string {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, it := range items {
		if s, ok := it.(string); ok {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// shardsSettled reports whether every one of n shards is online with a leader
// among its rf replicas, all of them in sync.
func shardsSettled(v []restoreShard, n, rf int) bool {
	if len(v) != n {
		return false
	}
	for _, s := range v {
		if s.Status != "online" || len(s.Replicas) != rf || !slices.Contains(s.Replicas, s.Leader) || !s.inSync || s.Term <= 0 {
			return false
		}
	}
	return true
}

// etcdSnapshot reads every key under prefix straight from etcd, with its value.
func etcdSnapshot(t require.TestingT, endpoint, prefix string) map[string]string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// TestBackupRestoreRoundTrip: a backup taken from a running cluster, restored
// into a brand-new etcd that replaced the lost one, brings every database
// back with the same placement, leaders and terms, and the running nodes
// converge on it without a restart.
func TestBackupRestoreRoundTrip(t *testing.T) {
	client, peer := freeURL(t), freeURL(t)
	e1 := startEtcdOn(t, client, peer)
	e1.waitStatus("/api/v1/health", 200, 15*time.Second)
	mb := startNode(t, "master,broker", client)
	masterIs(t, mb, nodeID(t, mb), 15*time.Second)
	mb.waitStatus("/api/v1/ready", 200, 10*time.Second)
	for _, name := range []string{"default", "c2"} {
		code, body := mb.post("/api/v1/storage-clusters", map[string]any{"name": name})
		require.Equal(t, 201, code, "create storage cluster %s: %v", name, body)
	}
	s1, s2 := startNode(t, "storage", client), startNode(t, "storage", client)
	for _, s := range []*Proc{s1, s2} {
		id := nodeID(t, s)
		require.Eventually(t, func() bool {
			code, c := mb.get("/api/v1/storage-clusters/default")
			return code == 200 && containsNode(c["nodes"], id)
		}, 15*time.Second, 20*time.Millisecond, "storage node %s never showed up live", id)
	}

	dbs := []struct {
		name      string
		shards, r int
	}{{"metrics", 4, 2}, {"logs", 2, 1}, {"events", 3, 2}}
	for _, db := range dbs {
		code, body := mb.post("/api/v1/databases", map[string]any{"name": db.name, "num_shards": db.shards, "replica_factor": db.r})
		require.Equal(t, 201, code, "create database %s: %v", db.name, body)
	}
	before := map[string][]restoreShard{}
	for _, db := range dbs {
		// Two equal reads in a row of a settled map: nothing is still moving.
		var last []restoreShard
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			v := readShards(mb, db.name)
			prev := last
			last = v
			require.True(c, shardsSettled(v, db.shards, db.r), "database %s not settled: %+v", db.name, v)
			require.True(c, slices.EqualFunc(v, prev, sameRestoredShard), "database %s still moving: %+v", db.name, v)
		}, 30*time.Second, 100*time.Millisecond)
		before[db.name] = last
	}

	file := filepath.Join(t.TempDir(), "cairn.backup")
	code, _, stderr := runCLI(t, "backup", "--out", file, "--etcd-endpoints", client)
	require.Equal(t, 0, code, "backup: %s", stderr)

	// Changes made after the backup are lost with etcd: once the nodes have
	// noticed the new etcd they must forget them, not keep serving them from
	// their local state or write them back.
	code, body := mb.post("/api/v1/databases", map[string]any{"name": "late", "num_shards": 2, "replica_factor": 1})
	require.Equal(t, 201, code, "create database late: %v", body)
	code, body = mb.post("/api/v1/storage-clusters", map[string]any{"name": "late_cluster"})
	require.Equal(t, 201, code, "create storage cluster late_cluster: %v", body)
	require.Eventually(t, func() bool { return shardsSettled(readShards(mb, "late"), 2, 1) }, 30*time.Second, 50*time.Millisecond)
	_, oldTerm := etcdMaster(t, client)

	// The running nodes are frozen while etcd is replaced and restored: awake,
	// they would register again in the new etcd at once, and restore refuses
	// a namespace that holds any key (see the report on leased keys).
	nodes := []*Proc{mb, s1, s2}
	frozen := false
	thaw := func() {
		if frozen {
			frozen = false
			for _, p := range nodes {
				p.cont()
			}
		}
	}
	t.Cleanup(thaw)
	for _, p := range nodes {
		p.stop()
	}
	frozen = true

	e1.kill9()
	require.NoError(t, os.RemoveAll(e1.dataDirArg()))
	e2 := startEtcdOn(t, client, peer)
	e2.waitStatus("/api/v1/health", 200, 15*time.Second)
	require.Eventually(t, func() bool {
		code, r := e2.get("/api/v1/ready")
		return code == 200 && r["etcd"] == "up"
	}, 15*time.Second, 50*time.Millisecond, "fresh etcd never came up")
	require.Empty(t, etcdSnapshot(t, client, "/cairn/"), "the fresh etcd must start empty")

	code, _, stderr = runCLI(t, "restore", "--in", file, "--etcd-endpoints", client)
	require.Equal(t, 0, code, "restore: %s", stderr)
	thaw()

	for _, db := range dbs {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := readShards(mb, db.name)
			require.True(c, slices.EqualFunc(got, before[db.name], sameRestoredShard),
				"database %s after restore:\n got  %+v\n want %+v", db.name, got, before[db.name])
		}, 30*time.Second, 100*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		code, body := mb.get("/api/v1/storage-clusters")
		return code == 200 && containsName(body["storage_clusters"], "default") && containsName(body["storage_clusters"], "c2")
	}, 15*time.Second, 50*time.Millisecond, "storage clusters not listed after restore")
	// What the nodes show comes from the new etcd, not from their memory of
	// the old one: the changes made after the backup are gone ...
	require.Eventually(t, func() bool {
		code, _ := mb.get("/api/v1/databases/late")
		return code == 404
	}, 15*time.Second, 50*time.Millisecond, "database created after the backup still served")
	require.Eventually(t, func() bool {
		code, body := mb.get("/api/v1/storage-clusters")
		return code == 200 && !containsName(body["storage_clusters"], "late_cluster")
	}, 15*time.Second, 50*time.Millisecond, "storage cluster created after the backup still listed")
	// ... every node holds its lease-bound records in the new etcd ...
	mbID, s1ID, s2ID := nodeID(t, mb), nodeID(t, s1), nodeID(t, s2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		keys := etcdSnapshot(c, client, "/cairn/")
		require.Contains(c, keys, "/cairn/master/node")
		require.Contains(c, keys, "/cairn/live/brokers/"+mbID)
		require.Contains(c, keys, "/cairn/storage/default/live/nodes/"+s1ID)
		require.Contains(c, keys, "/cairn/storage/default/live/nodes/"+s2ID)
	}, 15*time.Second, 50*time.Millisecond, "nodes never registered in the new etcd")
	// ... and the broker names the master of the new etcd's election.
	rec, newTerm := etcdMaster(t, client)
	require.Equal(t, mbID, rec["node_id"])
	require.Eventually(t, func() bool {
		code, m := mb.get("/api/v1/master")
		return code == 200 && m["term"] == float64(newTerm)
	}, 15*time.Second, 50*time.Millisecond, "the broker never named the new etcd's master term %d (old term %d)", newTerm, oldTerm)
	// Nothing lost was written back by a node acting on its stale state.
	keys := etcdSnapshot(t, client, "/cairn/")
	for k := range keys {
		require.NotContains(t, k, "late", "a change made after the backup came back")
	}

	code, _, stderr = runCLI(t, "restore", "--in", file, "--etcd-endpoints", client)
	require.Equal(t, 2, code, "restore into a non-empty namespace without --force: %s", stderr)
	require.Contains(t, stderr, "--force")
}

// sameRestoredShard compares what a restore must preserve (not the in-sync set).
func sameRestoredShard(a, b restoreShard) bool {
	return a.ID == b.ID && slices.Equal(a.Replicas, b.Replicas) && a.Leader == b.Leader && a.Term == b.Term && a.Status == b.Status
}

// TestRestoreRefusesCorruptFile: a truncated backup and one with a flipped
// byte are refused with exit 2 and a message saying why, before anything is
// written: an empty target stays empty, and even --force leaves a populated
// namespace untouched.
func TestRestoreRefusesCorruptFile(t *testing.T) {
	src := startEtcd(t)
	src.waitStatus("/api/v1/health", 200, 15*time.Second)
	mb := startNode(t, "master,broker", src.clientURL)
	mb.waitStatus("/api/v1/ready", 200, 15*time.Second)
	for _, name := range []string{"default", "east", "west"} {
		require.Eventually(t, func() bool {
			code, _ := mb.post("/api/v1/storage-clusters", map[string]any{"name": name})
			return code == 201 || code == 409 // 409: an earlier answer was lost
		}, 15*time.Second, 50*time.Millisecond, "create storage cluster %s", name)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.backup")
	code, _, stderr := runCLI(t, "backup", "--out", good, "--etcd-endpoints", src.clientURL)
	require.Equal(t, 0, code, "backup: %s", stderr)
	// Stopped cleanly, the node revokes its leases: what stays in etcd is
	// exactly the configuration, which must not change below.
	mb.term()
	want := etcdSnapshot(t, src.clientURL, "/cairn/")
	require.Contains(t, want, "/cairn/storage/config/east")

	data, err := os.ReadFile(good)
	require.NoError(t, err)
	require.Greater(t, len(data), 200)
	flipped := bytes.Clone(data)
	at := bytes.Index(flipped, []byte(`"east"`)) + 2 // inside a value, not the trailer
	require.Greater(t, at, 2)
	flipped[at] ^= 0x01
	bad := map[string][]byte{"truncated": data[:len(data)/2], "flipped": flipped}

	target := startEtcd(t)
	target.waitStatus("/api/v1/health", 200, 15*time.Second)
	for name, content := range bad {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".backup")
			require.NoError(t, os.WriteFile(file, content, 0o644))

			code, stdout, stderr := runCLI(t, "restore", "--in", file, "--etcd-endpoints", target.clientURL)
			require.Equal(t, 2, code, "restore of a %s file into an empty etcd: %s", name, stderr)
			require.Contains(t, stderr, "corrupt", "the message must say the file is damaged")
			require.Contains(t, stderr, file, "the message must name the file")
			require.Empty(t, stdout)
			require.Empty(t, etcdSnapshot(t, target.clientURL, "/cairn/"), "a refused restore wrote keys")

			code, _, stderr = runCLI(t, "restore", "--in", file, "--force", "--etcd-endpoints", src.clientURL)
			require.Equal(t, 2, code, "restore --force of a %s file: %s", name, stderr)
			require.Contains(t, stderr, "corrupt")
			require.NotContains(t, stderr, "deleted", "--force cleared the namespace before checking the file")
			require.Equal(t, want, etcdSnapshot(t, src.clientURL, "/cairn/"), "a refused restore --force changed keys")
		})
	}
	// The untouched file still restores: the refusals above were about the damage.
	code, _, stderr = runCLI(t, "restore", "--in", good, "--etcd-endpoints", target.clientURL)
	require.Equal(t, 0, code, "restore of the good file: %s", stderr)
	require.Contains(t, etcdSnapshot(t, target.clientURL, "/cairn/"), "/cairn/storage/config/east")
}

// TestAdminToken: with --admin-token every mutating endpoint answers 401 with
// the error envelope unless it gets the right bearer token; reads need none.
func TestAdminToken(t *testing.T) {
	p := start(t, append(standaloneArgs(t), "--admin-token", "s3cret")...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	id := nodeID(t, p)
	require.Eventually(t, func() bool {
		code, c := p.get("/api/v1/storage-clusters/default")
		return code == 200 && containsNode(c["nodes"], id)
	}, 15*time.Second, 20*time.Millisecond, "the standalone storage node never showed up live")

	db := map[string]any{"name": "guarded", "num_shards": 2, "replica_factor": 1}
	for _, auth := range []string{"", "Bearer wrong", "Bearer ", "Bearer s3cret2", "Basic czNjcmV0"} {
		code, body := p.send(http.MethodPost, "/api/v1/databases", db, auth)
		require.Equal(t, 401, code, "Authorization %q: %v", auth, body)
		env, _ := body["error"].(map[string]any)
		require.Equal(t, "unauthorized", env["code"], "Authorization %q: %v", auth, body)
		require.NotEmpty(t, env["message"])
	}
	code, body := p.get("/api/v1/databases")
	require.Equal(t, 200, code)
	require.False(t, containsName(body["databases"], "guarded"), "a refused create was applied: %v", body)

	// Every other mutating endpoint is guarded too, whatever its target.
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/storage-clusters"},
		{http.MethodDelete, "/api/v1/storage-clusters/default"},
		{http.MethodPatch, "/api/v1/databases/guarded"},
		{http.MethodDelete, "/api/v1/databases/guarded"},
		{http.MethodPost, "/api/v1/nodes/" + id + "/drain"},
		{http.MethodPost, "/api/v1/nodes/" + id + "/undrain"},
		{http.MethodPost, "/api/v1/databases/guarded/shards/0/leader"},
		{http.MethodPost, "/api/v1/rebalance?dry_run=true"},
	} {
		code, body := p.send(c.method, c.path, map[string]any{"name": "x"}, "")
		require.Equal(t, 401, code, "%s %s without a token: %v", c.method, c.path, body)
	}

	code, body = p.send(http.MethodPost, "/api/v1/databases", db, "Bearer s3cret")
	require.Equal(t, 201, code, "with the token: %v", body)
	require.Eventually(t, func() bool {
		code, body := p.get("/api/v1/databases")
		return code == 200 && containsName(body["databases"], "guarded")
	}, 10*time.Second, 20*time.Millisecond)

	for _, path := range []string{"/api/v1/health", "/api/v1/ready", "/api/v1/master", "/api/v1/nodes",
		"/api/v1/storage-clusters", "/api/v1/storage-clusters/default", "/api/v1/databases",
		"/api/v1/databases/guarded", "/api/v1/explore", "/"} {
		// Eventually: /master answers 404 until this node's state has seen
		// the election, which may trail the database creation.
		require.Eventually(t, func() bool {
			code, _ := p.send(http.MethodGet, path, nil, "")
			return code == 200
		}, 10*time.Second, 20*time.Millisecond, "GET %s needs no token", path)
	}
	require.Eventually(t, func() bool {
		code, _ := p.send(http.MethodGet, "/api/v1/databases/guarded/shards", nil, "")
		return code == 200
	}, 10*time.Second, 20*time.Millisecond, "GET .../shards needs no token")
}
