package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdAuthFixture is the TLS material and passwords of TestEtcdMutualTLSAndAuth.
type etcdAuthFixture struct {
	dir                     string
	member, node, intruder  certstest.Files // one CA
	rogue                   certstest.Files // another CA
	rootPW, userPW, user2PW string          // files
	secrets                 []string        // the passwords themselves
}

func newEtcdAuthFixture(t *testing.T) *etcdAuthFixture {
	f := &etcdAuthFixture{dir: t.TempDir()}
	ca := certstest.NewCA(t, "etcd-test-ca")
	issue := func(ca *certstest.CA, cn string) certstest.Files {
		d := filepath.Join(f.dir, cn)
		require.NoError(t, os.MkdirAll(d, 0o700))
		return ca.WriteFiles(t, d, cn)
	}
	// The nodes' certificate names no etcd user: they log in by password.
	f.member, f.node, f.intruder = issue(ca, "member"), issue(ca, "cairn-node"), issue(ca, "intruder")
	f.rogue = issue(certstest.NewCA(t, "rogue-ca"), "cairn")
	secret := func(name string) string {
		s := randomSecret(t, name+"-")
		p := filepath.Join(f.dir, name+".pw")
		require.NoError(t, os.WriteFile(p, []byte(s+"\n"), 0o600))
		f.secrets = append(f.secrets, s)
		return p
	}
	f.rootPW, f.userPW, f.user2PW = secret("root"), secret("cairn"), secret("cairn2")
	return f
}

// startMember starts a `--role etcd` node serving clients and peers over
// mTLS, and turns etcd's auth on with cairn etcd-auth-setup (user cairn,
// namespace /cairn, from the environment the test set).
func (f *etcdAuthFixture) startMember(t *testing.T) etcdMember {
	endpoint := "https://" + freeAddr(t)
	p := start(t, append([]string{"--role", "etcd", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t), "--log-format", "json"},
		f.memberTLSArgs(endpoint, "https://"+freeAddr(t))...)...)
	p.waitStatus("/api/v1/health", 200, 15*time.Second)
	var out, errOut string
	require.Eventually(t, func() bool {
		var code int
		code, out, errOut = runCLI(t, "etcd-auth-setup", "--etcd-endpoints", endpoint,
			"--etcd-root-password-file", f.rootPW, "--timeout", "5s")
		return code == 0
	}, 45*time.Second, 200*time.Millisecond, "etcd-auth-setup never succeeded: %s", errOut)
	require.Contains(t, out, "ok: role cairn may read and write /cairn/*")
	require.Contains(t, out, "ok: enable authentication")
	return etcdMember{Proc: p, clientURL: endpoint}
}

// client connects to the member from the test.
func (f *etcdAuthFixture) client(t *testing.T, endpoint string, cfg kv.EtcdConfig) *kv.EtcdStore {
	cfg.Endpoints = []string{endpoint}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	cfg.DialTimeout = cfg.RequestTimeout
	s, err := kv.NewEtcdStore(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func readSecret(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.TrimSpace(string(data))
}

// TestEtcdMutualTLSAndAuth (issue 26): etcd itself authenticated. A
// `--role etcd` member serves clients and peers over mTLS, and `cairn
// etcd-auth-setup` turns etcd's auth on with a user `cairn` whose role
// covers /cairn/ only. The master+broker and three storage nodes (RF 3)
// connect with a client certificate and that user's password, from
// CAIRN_* variables. Clients without credentials are refused and change
// nothing: no certificate, a certificate of another CA, plain HTTP, a
// valid certificate naming no etcd user (by the kv client and by `cairn
// backup`), a wrong password. With the credentials, the kill -9 failover of
// a storage leader loses no acknowledged write, `cairn backup` works, and
// `cairn restore` works into a second namespace set up for a second user,
// which the first user cannot touch. No password shows in a log, /metrics,
// a state copy or the backup.
func TestEtcdMutualTLSAndAuth(t *testing.T) {
	f := newEtcdAuthFixture(t)
	t.Setenv("CAIRN_ETCD_CACERT", f.node.CA)
	t.Setenv("CAIRN_ETCD_CERT", f.node.Cert)
	t.Setenv("CAIRN_ETCD_KEY", f.node.Key)
	t.Setenv("CAIRN_ETCD_USERNAME", "cairn")
	t.Setenv("CAIRN_ETCD_PASSWORD_FILE", f.userPW)
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: dataShards, rf: 3,
		etcd: func() etcdMember { return f.startMember(t) }})
	endpoint := c.etcd.args[slices.Index(c.etcd.args, "--etcd-listen-client-url")+1]
	ctx := context.Background()

	withCert := kv.EtcdConfig{CACert: f.node.CA, Cert: f.node.Cert, Key: f.node.Key}
	authorized := withCert
	authorized.Username, authorized.Password, authorized.Namespace = "cairn", readSecret(t, f.userPW), "/cairn"
	cairn := f.client(t, endpoint, authorized)
	dbKey := "/cairn/database/config/" + c.db
	before, err := cairn.Get(ctx, dbKey)
	require.NoError(t, err)
	require.NotNil(t, before, "the cluster wrote its database config through the authenticated client")
	_, err = cairn.Get(ctx, "/elsewhere/key")
	require.ErrorIs(t, err, kv.ErrAccessDenied, "cairn's role covers its namespace only")

	// Refused at the TLS handshake (each within its short timeout).
	short := 2 * time.Second
	for name, cfg := range map[string]kv.EtcdConfig{
		"no client certificate":         {CACert: f.node.CA, RequestTimeout: short},
		"certificate of another CA":     {CACert: f.node.CA, Cert: f.rogue.Cert, Key: f.rogue.Key, RequestTimeout: short},
		"member certificate unverified": {Cert: f.node.Cert, Key: f.node.Key, RequestTimeout: short},
	} {
		s := f.client(t, endpoint, cfg)
		_, err := s.Get(ctx, dbKey)
		require.Error(t, err, name)
		_, err = s.DeletePrefix(ctx, "/cairn/database/config/")
		require.Error(t, err, name)
	}
	plain := f.client(t, "http://"+strings.TrimPrefix(endpoint, "https://"), kv.EtcdConfig{RequestTimeout: short})
	_, err = plain.Get(ctx, dbKey)
	require.Error(t, err, "plain HTTP")
	// Refused by etcd's auth: a certificate of the right CA naming no user,
	// and a wrong password.
	intruder := f.client(t, endpoint, kv.EtcdConfig{CACert: f.intruder.CA, Cert: f.intruder.Cert, Key: f.intruder.Key})
	wrongPW := withCert
	wrongPW.Username, wrongPW.Password = "cairn", "guess"
	for name, s := range map[string]*kv.EtcdStore{"certificate naming no user": intruder, "wrong password": f.client(t, endpoint, wrongPW)} {
		_, err := s.Get(ctx, dbKey)
		require.ErrorIs(t, err, kv.ErrAccessDenied, name)
		_, err = s.DeletePrefix(ctx, "/cairn/database/config/")
		require.ErrorIs(t, err, kv.ErrAccessDenied, name)
	}
	code, _, stderr := runCLI(t, "backup", "--out", filepath.Join(t.TempDir(), "stolen.json"), "--etcd-endpoints", endpoint,
		"--etcd-cert", f.intruder.Cert, "--etcd-key", f.intruder.Key, "--etcd-username", "", "--etcd-password-file", "", "--timeout", "5s")
	require.Equal(t, 1, code, "cairn backup without credentials: %s", stderr)
	require.Contains(t, stderr, "permission denied")
	after, err := cairn.Get(ctx, dbKey)
	require.NoError(t, err)
	require.Equal(t, before.ModRev, after.ModRev, "the refused deletes changed nothing")
	code, _ = c.broker.get("/api/v1/databases/" + c.db)
	require.Equal(t, 200, code)

	killLeaderLosesNothing(t, c)

	// Backup with the credentials; restore into /cairn2, set up for user
	// cairn2 (auth is on: the setup logs in as root).
	file := filepath.Join(t.TempDir(), "backup.json")
	code, _, stderr = runCLI(t, "backup", "--out", file, "--etcd-endpoints", endpoint)
	require.Equal(t, 0, code, stderr)
	code, out, stderr := runCLI(t, "etcd-auth-setup", "--etcd-endpoints", endpoint, "--etcd-root-password-file", f.rootPW,
		"--namespace", "/cairn2", "--etcd-username", "cairn2", "--etcd-password-file", f.user2PW, "--timeout", "10s")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "ok: create user cairn2")
	code, _, stderr = runCLI(t, "restore", "--in", file, "--etcd-endpoints", endpoint, "--namespace", "/cairn2")
	require.NotEqual(t, 0, code, "user cairn cannot restore into /cairn2")
	require.Contains(t, stderr, "permission denied")
	code, _, stderr = runCLI(t, "restore", "--in", file, "--etcd-endpoints", endpoint, "--namespace", "/cairn2",
		"--etcd-username", "cairn2", "--etcd-password-file", f.user2PW)
	require.Equal(t, 0, code, stderr)
	second := authorized
	second.Username, second.Password, second.Namespace = "cairn2", readSecret(t, f.user2PW), "/cairn2"
	restored, err := f.client(t, endpoint, second).Get(ctx, "/cairn2/database/config/"+c.db)
	require.NoError(t, err)
	require.NotNil(t, restored)
	require.JSONEq(t, string(after.Value), string(restored.Value), "the restored database config")
	_, err = cairn.Get(ctx, "/cairn2/database/config/"+c.db)
	require.ErrorIs(t, err, kv.ErrAccessDenied, "one Cairn cluster's user cannot read another's namespace")

	requireNoSecrets(t, c, f.secrets...)
	for _, s := range f.secrets {
		require.NotContains(t, readLog(t, c.etcd), s, "a password in the etcd member's log")
	}
}

// memberTLSArgs are the flags of an embedded member serving clients and
// peers over mTLS with the fixture's member certificate.
func (f *etcdAuthFixture) memberTLSArgs(clientURL, peerURL string) []string {
	return []string{"--etcd-listen-client-url", clientURL, "--etcd-listen-peer-url", peerURL,
		"--etcd-cert-file", f.member.Cert, "--etcd-key-file", f.member.Key,
		"--etcd-trusted-ca-file", f.member.CA, "--etcd-client-cert-auth",
		"--etcd-peer-cert-file", f.member.Cert, "--etcd-peer-key-file", f.member.Key,
		"--etcd-peer-trusted-ca-file", f.member.CA, "--etcd-peer-client-cert-auth"}
}

// TestStandaloneEtcdAuthTurnedOnWhileRunning: a standalone node whose
// embedded member serves mTLS, started with the user's password before
// etcd's auth exists, keeps working when `cairn etcd-auth-setup` turns it on
// under it (its client, by default its member's certificate, which names no
// etcd user, logs in by password): DDL and writes succeed after the setup.
// Restarted with auth on (its client is made before its member starts and
// logs in at its first call), it is ready again and answers the point
// written before. A client with a certificate but no password is refused.
// The member listens on every interface: the node warns that etcd's auth is
// off before the setup, and not after.
func TestStandaloneEtcdAuthTurnedOnWhileRunning(t *testing.T) {
	f := newEtcdAuthFixture(t)
	t.Setenv("CAIRN_ETCD_USERNAME", "cairn")
	t.Setenv("CAIRN_ETCD_PASSWORD_FILE", f.userPW)
	// The member serves clients on every interface, so the node checks
	// etcd's auth at start.
	port := freePort(t)
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", port)
	args := append([]string{"--data-dir", t.TempDir(), "--http-addr", freeAddr(t), "--log-format", "json"},
		f.memberTLSArgs(fmt.Sprintf("https://0.0.0.0:%d", port), "https://"+freeAddr(t))...)
	p := start(t, append(args, "--etcd-advertise-client-url", endpoint)...)
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	const authOff = `"surface":"etcd_auth_off"`
	require.Eventually(t, func() bool { return strings.Contains(readLog(t, p), authOff) }, 15*time.Second, 50*time.Millisecond,
		"a member on every interface without etcd auth warns")

	code, out, stderr := runCLI(t, "etcd-auth-setup", "--etcd-endpoints", endpoint, "--etcd-cacert", f.member.CA,
		"--etcd-cert", f.node.Cert, "--etcd-key", f.node.Key, "--etcd-root-password-file", f.rootPW)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "ok: enable authentication")

	code, body := p.post("/api/v1/databases", map[string]any{"name": "db", "num_shards": 2, "replica_factor": 1})
	require.Equal(t, 201, code, "DDL after auth was turned on: %v", body)
	c := &dataCluster{t: t, broker: p, db: "db"}
	require.Eventually(t, func() bool {
		code, _, _ := postData(p.client, "http://"+p.addr+"/api/v1/write?db=db", []byte("m,s=a value=7 1000000000\n"))
		return code == 204
	}, 20*time.Second, 50*time.Millisecond, "write after auth was turned on")

	// Watches opened before the setup carried no token: etcd refuses new
	// ones on those streams until the node opens fresh ones, which it does
	// at the first refusal. The embedded member logs each refusal.
	const noUser = "cannot find a user for permission check"
	refusals := func() int { return strings.Count(readLog(t, p), noUser) }
	last, changed := refusals(), time.Now()
	require.Eventually(t, func() bool {
		if n := refusals(); n != last {
			last, changed = n, time.Now()
		}
		return time.Since(changed) > 3*time.Second
	}, 30*time.Second, 100*time.Millisecond, "etcd keeps refusing this node's calls after auth was turned on (%d refusals so far)", last)

	p.term()
	p.restart()
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	res := c.queryAll("m", 20*time.Second)
	require.Len(t, res.Series, 1)
	require.Equal(t, [][2]json.Number{{"1000000000", "7"}}, res.Series[0].Points)
	require.NotContains(t, readLog(t, p), "etcd refused this node's credentials")
	require.Equal(t, 1, strings.Count(readLog(t, p), authOff), "no warning once auth is on")

	noPassword := f.client(t, endpoint, kv.EtcdConfig{CACert: f.node.CA, Cert: f.node.Cert, Key: f.node.Key})
	_, err := noPassword.Get(context.Background(), "/cairn/database/config/db")
	require.ErrorIs(t, err, kv.ErrAccessDenied)
}

// TestEtcdClusterMutualTLS: three `--role etcd` members found one cluster
// over peer mTLS (the README's production set-up), serve clients over mTLS
// and get etcd's auth from `cairn etcd-auth-setup`; a master+broker logging
// in by password keeps taking DDL after the etcd leader is killed.
func TestEtcdClusterMutualTLS(t *testing.T) {
	f := newEtcdAuthFixture(t)
	const n = 3
	peers, clients, initial := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		peers[i], clients[i] = "https://"+freeAddr(t), "https://"+freeAddr(t)
		initial[i] = fmt.Sprintf("e%d=%s", i, peers[i])
	}
	// Every process, the members too, gets the client settings: a member's
	// own client logs in as cairn once auth is on.
	t.Setenv("CAIRN_ETCD_CACERT", f.node.CA)
	t.Setenv("CAIRN_ETCD_CERT", f.node.Cert)
	t.Setenv("CAIRN_ETCD_KEY", f.node.Key)
	t.Setenv("CAIRN_ETCD_USERNAME", "cairn")
	t.Setenv("CAIRN_ETCD_PASSWORD_FILE", f.userPW)
	members := make([]*Proc, n)
	for i := range n { // started together: each waits for a quorum of the others
		members[i] = start(t, append([]string{"--role", "etcd", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--etcd-name", fmt.Sprintf("e%d", i), "--etcd-initial-cluster", strings.Join(initial, ","), "--log-format", "json"},
			f.memberTLSArgs(clients[i], peers[i])...)...)
	}
	for _, m := range members {
		m.waitStatus("/api/v1/health", 200, 30*time.Second)
	}
	endpoints := strings.Join(clients, ",")
	var errOut string
	require.Eventually(t, func() bool {
		var code int
		code, _, errOut = runCLI(t, "etcd-auth-setup", "--etcd-endpoints", endpoints, "--etcd-root-password-file", f.rootPW, "--timeout", "5s")
		return code == 0
	}, 45*time.Second, 200*time.Millisecond, "etcd-auth-setup never succeeded: %s", errOut)

	b := startNode(t, "master,broker", endpoints)
	id := nodeID(t, b)
	b.waitStatus("/api/v1/ready", 200, 20*time.Second)
	masterIs(t, b, id, 20*time.Second)

	tlsCfg, err := transport.TLSInfo{TrustedCAFile: f.node.CA, CertFile: f.node.Cert, KeyFile: f.node.Key}.ClientConfig()
	require.NoError(t, err)
	root, err := clientv3.New(clientv3.Config{Endpoints: clients, DialTimeout: 5 * time.Second, TLS: tlsCfg,
		Username: kv.RootUser, Password: readSecret(t, f.rootPW)})
	require.NoError(t, err)
	defer root.Close()
	leader := -1
	for i, u := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := root.Status(ctx, u)
		cancel()
		require.NoError(t, err)
		if st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	require.GreaterOrEqual(t, leader, 0, "no etcd leader")
	members[leader].kill9()
	require.Eventually(t, func() bool {
		code, _ := b.post("/api/v1/storage-clusters", map[string]any{"name": "c2"})
		return code == 201 || code == 409 // 409: an earlier attempt was written but its answer was lost
	}, 20*time.Second, 100*time.Millisecond, "DDL never succeeded with the etcd leader down")
	masterIs(t, b, id, 10*time.Second)
	for i, m := range members {
		if i != leader {
			m.waitStatus("/api/v1/ready", 200, 10*time.Second)
			require.NotContains(t, readLog(t, m), "refused this node's credentials", "member e%d", i)
		}
	}
	// The members' own watch streams opened before the setup, without a
	// token: etcd refused new watches on them until each member opened
	// fresh ones (it does at the first refusal), and logs each refusal.
	refusals := func() (n int) {
		for i, m := range members {
			if i != leader {
				n += strings.Count(readLog(t, m), "cannot find a user for permission check")
			}
		}
		return n
	}
	last, changed := refusals(), time.Now()
	require.Eventually(t, func() bool {
		if n := refusals(); n != last {
			last, changed = n, time.Now()
		}
		return time.Since(changed) > 3*time.Second
	}, 30*time.Second, 100*time.Millisecond,
		"etcd keeps refusing the members' own watches after auth was turned on (%d refusals so far)", last)
}
