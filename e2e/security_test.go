package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

func randomSecret(t testing.TB, prefix string) string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return prefix + hex.EncodeToString(b)
}

// internalProbe is one request to a storage node's internal API.
type internalProbe struct {
	method, path string
	body         []byte
}

// internalProbes are every internal endpoint of shard 0, with arguments that
// would succeed (or change state) if the request were accepted: an injected
// point, a leave of a real follower at the current term.
func (c *dataCluster) internalProbes(t testing.TB) []internalProbe {
	t.Helper()
	var s0 dataShard
	for _, s := range c.shardsOf() {
		if s.ID == 0 {
			s0 = s
		}
	}
	require.NotEmpty(t, s0.Leader)
	follower := ""
	for _, r := range s0.ISR {
		if r != s0.Leader {
			follower = r
		}
	}
	entry, err := engine.Entry{Term: uint64(s0.Term), Points: []lineproto.Point{
		{Metric: "injected", Tags: []lineproto.Tag{{Key: "by", Value: "probe"}}, Field: "value", Value: 666, TS: dataBase}}}.MarshalBinary()
	require.NoError(t, err)
	base := fmt.Sprintf("/internal/v1/shards/%s/0", c.db)
	return []internalProbe{
		{"POST", fmt.Sprintf("%s/write?term=%d", base, s0.Term), entry},
		{"GET", fmt.Sprintf("%s/query?metric=%s&start=0&end=%d", base, "m", int64(1)<<62), nil},
		{"GET", fmt.Sprintf("%s/log?term=%d&node=%s&after=0&after_term=0&wait_ms=0", base, s0.Term, follower), nil},
		{"GET", fmt.Sprintf("%s/snapshot?term=%d", base, s0.Term), nil},
		{"POST", fmt.Sprintf("%s/leave?term=%d&node=%s", base, s0.Term, follower), nil},
		{"GET", "/internal/v1/no-such-endpoint", nil},
	}
}

// probe sends one internal request; sign (nil: no proof) adds a proof.
func probe(t testing.TB, client *http.Client, addr string, p internalProbe, sign func(*http.Request, []byte)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(p.method, "http://"+addr+p.path, bytes.NewReader(p.body))
	require.NoError(t, err)
	if sign != nil {
		sign(req, p.body)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(peerauth.HeaderError)
}

// signWith signs for the node id node (empty: a version 2 proof, bound to
// the address only).
func signWith(secret, node string, at time.Time) func(*http.Request, []byte) {
	v := peerauth.V3
	if node == "" {
		v = peerauth.V2
	}
	return func(r *http.Request, body []byte) { peerauth.SignRequest(peerauth.Key(secret), r, v, node, body, at) }
}

// requireCapturedRefused: a request signed for storage node 0 and accepted
// there, captured and sent again, is refused by node 0 (replayed) and by
// every other node (wrong_node), also with its Host rewritten to theirs.
func requireCapturedRefused(t *testing.T, c *dataCluster, secret string, client *http.Client, p internalProbe) {
	t.Helper()
	var captured http.Header
	capture := func(r *http.Request, body []byte) {
		signWith(secret, c.ids[0], time.Now())(r, body)
		captured = r.Header.Clone()
	}
	code, _ := probe(t, client, c.storage[0].addr, p, capture)
	require.Equal(t, http.StatusOK, code)
	replay := func(host string) func(*http.Request, []byte) {
		return func(r *http.Request, _ []byte) {
			r.Header = captured.Clone()
			if host != "" {
				r.Host = host
			}
		}
	}
	code, cause := probe(t, client, c.storage[0].addr, p, replay(""))
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "replayed", cause)
	for _, s := range c.storage[1:] {
		for _, host := range []string{c.storage[0].addr, s.addr} {
			code, cause = probe(t, client, s.addr, p, replay(host))
			require.Equal(t, http.StatusUnauthorized, code, "captured request sent to %s as %s", s.addr, host)
			require.Equal(t, "wrong_node", cause)
		}
	}
}

// isrState is the part of the shards that a refused request must not change.
func isrState(shards []dataShard) string {
	var b strings.Builder
	for _, s := range shards {
		isr := slices.Clone(s.ISR)
		slices.Sort(isr)
		fmt.Fprintf(&b, "%d:%s@%d%v;", s.ID, s.Leader, s.Term, isr)
	}
	return b.String()
}

// requireInternalClosed: every internal endpoint of every storage node
// refuses requests without proof, with a wrong secret's proof, with a stale
// proof, with a proof dated more than 5 s ahead, with the right secret's
// proof made for another node id (a rogue peer) and with a version 2 proof
// (bound to the address only; no node of protocol 2 is live) — 401 and the
// cause, never 404 or 2xx — and nothing changes.
func requireInternalClosed(t *testing.T, c *dataCluster, secret string, client *http.Client) {
	t.Helper()
	before := isrState(c.shardsOf())
	probes := c.internalProbes(t)
	for i, s := range c.storage {
		other := c.ids[(i+1)%len(c.ids)]
		for _, p := range probes {
			for _, tc := range []struct {
				name  string
				sign  func(*http.Request, []byte)
				cause string
			}{
				{"no proof", nil, "missing"},
				{"wrong secret", signWith("not-"+secret, c.ids[i], time.Now()), "bad_signature"},
				{"stale", signWith(secret, c.ids[i], time.Now().Add(-10*time.Minute)), "stale"},
				{"future", signWith(secret, c.ids[i], time.Now().Add(time.Minute)), "stale"},
				{"for another node", signWith(secret, other, time.Now()), "wrong_node"},
				{"version 2", signWith(secret, "", time.Now()), "unbound"},
			} {
				code, cause := probe(t, client, s.addr, p, tc.sign)
				require.Equal(t, http.StatusUnauthorized, code, "%s %s %s on %s", tc.name, p.method, p.path, s.name)
				require.Equal(t, tc.cause, cause, "%s %s %s", tc.name, p.method, p.path)
			}
		}
	}
	// Control: the same client with the right secret gets through, so the
	// 401s above are the proof's doing.
	code, _ := probe(t, client, c.storage[0].addr, probes[1], signWith(secret, c.ids[0], time.Now()))
	require.Equal(t, http.StatusOK, code)
	requireCapturedRefused(t, c, secret, client, probes[1])

	// Nothing changed: the in-sync sets are intact and no point was
	// injected (a write through the broker goes through meanwhile).
	require.Equal(t, before, isrState(c.shardsOf()))
	w := startDataWriter(t, c, dataSeries, dataPerPost, 3, 0)
	w.waitAcked(3, 20*time.Second)
	w.stop()
	require.Equal(t, before, isrState(c.shardsOf()))
	require.Empty(t, c.queryAll("injected", 10*time.Second).Series, "a refused write must inject nothing")
}

// TestClusterSecret: with CAIRN_CLUSTER_SECRET and CAIRN_ADMIN_TOKEN in the
// environment, an RF 3 cluster of three storage nodes replicates; every
// internal endpoint refuses requests without valid proof and nothing
// changes; a node restarted with a wrong secret never re-enters an in-sync
// set and says why; the kill -9 failover scenario passes; and neither secret
// shows in logs, /metrics, /api/v1/explore, /debug/pprof/cmdline,
// state.backup or a backup file.
func TestClusterSecret(t *testing.T) {
	secret, admin := randomSecret(t, "cs-"), randomSecret(t, "adm-")
	t.Setenv("CAIRN_CLUSTER_SECRET", secret)
	t.Setenv("CAIRN_ADMIN_TOKEN", admin)
	c := startRF3(t, false)

	requireInternalClosed(t, c, secret, &http.Client{Timeout: 5 * time.Second})

	// A node with a wrong secret: a pure follower, restarted with it.
	victim := c.ids[0]
	p := c.proc(victim)
	c.moveLeadersOff(victim)
	p.term()
	c.waitLeft(victim, 15*time.Second)
	wrong := randomSecret(t, "wrong-")
	args := slices.Clone(p.args)
	p.args = append(p.args, "--cluster-secret", wrong)
	p.restart()
	require.Equal(t, victim, nodeID(t, p))
	require.Eventually(t, func() bool {
		return strings.Contains(readLog(t, p), "cannot authenticate to peer")
	}, 15*time.Second, 50*time.Millisecond, "the node with a wrong secret must say why it cannot replicate")
	require.Contains(t, readLog(t, p), `"cause":"bad_signature"`)
	require.Never(t, func() bool {
		for _, s := range c.shardsOf() {
			if slices.Contains(s.ISR, victim) {
				return true
			}
		}
		return false
	}, 4*dataLagBound, 100*time.Millisecond, "a node with a wrong secret entered an in-sync set")
	logged := readLog(t, p)
	require.Equal(t, 1, strings.Count(logged, "secrets given as command-line flags"), "one WARN for the secret flag")
	require.Contains(t, logged, `"flags":["cluster-secret"]`)
	code, cmdline := getText(t, p, "/debug/pprof/cmdline")
	require.Equal(t, 200, code)
	require.Contains(t, cmdline, "<redacted>")
	require.NotContains(t, cmdline, wrong)
	leadersSaw := false
	for _, s := range c.storage[1:] {
		leadersSaw = leadersSaw || strings.Contains(readLog(t, s), "refused an internal request")
	}
	require.True(t, leadersSaw, "the leaders log the refused requests")
	p.term()
	p.args = args
	p.restart()
	c.waitHealthy(30 * time.Second)

	killLeaderLosesNothing(t, c)
	requireNoSecrets(t, c, secret, admin)
}

// TestClusterTLS: the same cluster over HTTPS with mTLS on the internal API
// (a CA and certificates made by the test): writes and the kill -9 failover
// work, the public API needs no client certificate, the internal API refuses
// a client without one even with a valid proof, and plain HTTP is not served.
func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "cairn-test-ca")
	f := ca.WriteFiles(t, dir, "node")
	secret := randomSecret(t, "cs-")
	t.Setenv("CAIRN_TLS_CERT", f.Cert)
	t.Setenv("CAIRN_TLS_KEY", f.Key)
	t.Setenv("CAIRN_TLS_CA", f.CA)
	t.Setenv("CAIRN_TLS_CLIENT_CA", f.CA)
	t.Setenv("CAIRN_CLUSTER_SECRET", secret)
	setTestTLS(ca.ClientTLS(t, "e2e-client"))
	t.Cleanup(func() { setTestTLS(nil) })
	c := startRF3(t, false)

	withCert := testClient(5 * time.Second)
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &testTransport{https: true,
		base: &http.Transport{TLSClientConfig: ca.ClientTLS(t, "")}}}
	plain := &http.Client{Timeout: 5 * time.Second}
	q := c.internalProbes(t)[1]
	for i, s := range c.storage {
		code, cause := probe(t, noCert, s.addr, q, signWith(secret, c.ids[i], time.Now()))
		require.Equal(t, http.StatusUnauthorized, code, "no client certificate, valid proof")
		require.Equal(t, "client_cert", cause)
		code, cause = probe(t, withCert, s.addr, q, nil)
		require.Equal(t, http.StatusUnauthorized, code, "client certificate, no proof")
		require.Equal(t, "missing", cause)
		code, _ = probe(t, withCert, s.addr, q, signWith(secret, c.ids[i], time.Now()))
		require.Equal(t, http.StatusOK, code, "client certificate and proof")

		resp, err := noCert.Get("https://" + s.addr + "/api/v1/health")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "the public API needs no client certificate")
		resp, err = plain.Get("http://" + s.addr + "/api/v1/health")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP on an HTTPS port")
	}
	killLeaderLosesNothing(t, c)
	requireNoSecrets(t, c, secret)
}

func readLog(t testing.TB, p *Proc) string {
	t.Helper()
	data, err := os.ReadFile(p.log)
	require.NoError(t, err)
	// The harness's own "=== start <args>" lines are not the process's.
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "=== start ") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func getText(t testing.TB, p *Proc, path string) (int, string) {
	t.Helper()
	resp, err := p.client.Get("http://" + p.addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(data)
}

// requireNoSecrets greps every place a secret could leak for each secret:
// process logs, /metrics, /api/v1/explore, /debug/pprof/cmdline, every
// state.backup and a `cairn backup` file.
func requireNoSecrets(t *testing.T, c *dataCluster, secrets ...string) {
	t.Helper()
	procs := append([]*Proc{c.broker}, c.storage...)
	places := map[string]string{}
	for _, p := range procs {
		places[p.name+" log"] = readLog(t, p)
		for _, path := range []string{"/metrics", "/api/v1/explore?role=broker", "/api/v1/explore?role=storage",
			"/api/v1/explore?role=master", "/debug/pprof/cmdline", "/api/v1/nodes"} {
			code, body := getText(t, p, path)
			if code == 200 || strings.Contains(path, "explore") {
				places[p.name+" "+path] = body
			}
		}
		require.Contains(t, places[p.name+" /metrics"], "go_goroutines")
		require.Contains(t, places[p.name+" /debug/pprof/cmdline"], "--role")
		// A node restarted a moment ago may not have saved its copy yet.
		var data []byte
		require.Eventually(t, func() bool {
			var err error
			data, err = os.ReadFile(filepath.Join(p.dataDirArg(), "state.backup"))
			return err == nil && len(data) > 0
		}, 15*time.Second, 50*time.Millisecond, "%s wrote no state.backup", p.name)
		places[p.name+" state.backup"] = string(data)
	}
	endpoint := ""
	for i, a := range c.etcd.args {
		if a == "--etcd-listen-client-url" {
			endpoint = c.etcd.args[i+1]
		}
	}
	file := filepath.Join(t.TempDir(), "backup.json")
	code, _, stderr := runCLI(t, "backup", "--out", file, "--etcd-endpoints", endpoint)
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(data), `"`+c.db+`"`)
	places["backup file"] = string(data)
	for where, text := range places {
		for _, s := range secrets {
			require.NotContains(t, text, s, "a secret leaked into %s", where)
		}
	}
}

// TestSecurityDefaults: a node without a cluster secret behaves as before and
// warns once that its internal API is open; secret files work; a bad TLS
// file or a secret given twice exits 2 without quoting the secret.
func TestSecurityDefaults(t *testing.T) {
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	logged := readLog(t, p)
	require.Equal(t, 1, strings.Count(logged, "the internal API (/internal/) is open"), logged)
	require.NotContains(t, logged, "secrets given as command-line flags")

	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("file-secret-value\n"), 0o600))
	s := start(t, append(standaloneArgs(t), "--cluster-secret-file", secretFile, "--admin-token-file", secretFile)...)
	s.waitStatus("/api/v1/health", 200, 20*time.Second)
	code, _ := s.get("/api/v1/databases")
	require.Equal(t, 200, code, "reads stay open with only an admin token")
	code, _ = s.post("/api/v1/databases", map[string]any{"name": "x", "num_shards": 1})
	require.Equal(t, 401, code)
	code, _ = s.send("POST", "/api/v1/storage-clusters", map[string]any{"name": "other"}, "Bearer file-secret-value")
	require.Equal(t, 201, code)
	require.Eventually(t, func() bool {
		code, _ := probe(t, &http.Client{Timeout: 5 * time.Second}, s.addr, internalProbe{"GET", "/internal/v1/shards/x/0/query", nil},
			signWith("file-secret-value", nodeID(t, s), time.Now()))
		return code == 404 // the proof passes; the shard is not hosted
	}, 10*time.Second, 50*time.Millisecond)
	require.NotContains(t, readLog(t, s), "file-secret-value")

	for _, args := range [][]string{
		{"--cluster-secret", "flag-secret-value", "--cluster-secret-file", secretFile},
		{"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", filepath.Join(dir, "missing-key.pem"), "--cluster-secret", "flag-secret-value"},
	} {
		code, _, stderr := runCLI(t, append(standaloneArgs(t), args...)...)
		require.Equal(t, 2, code, stderr)
		require.NotContains(t, stderr, "flag-secret-value")
		require.NotContains(t, stderr, "file-secret-value")
	}
}
