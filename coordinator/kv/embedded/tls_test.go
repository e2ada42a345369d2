package embedded_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/embedded"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tlsMember is a member serving clients and peers over mTLS, with the
// files a client needs.
type tlsMember struct {
	*embedded.Server
	endpoint string
	ca       string // the CA that signed every certificate below
	certs    map[string]certstest.Files
	rogue    certstest.Files // a certificate from another CA
}

// leaf writes a certificate with common name cn signed by ca.
func leaf(t *testing.T, ca *certstest.CA, dir, cn string) certstest.Files {
	d := filepath.Join(dir, cn)
	require.NoError(t, os.MkdirAll(d, 0o700))
	return ca.WriteFiles(t, d, cn)
}

func startTLSMember(t *testing.T) *tlsMember {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "etcd-test-ca")
	m := &tlsMember{certs: map[string]certstest.Files{}}
	for _, cn := range []string{"member", "cairn", "intruder"} {
		m.certs[cn] = leaf(t, ca, dir, cn)
	}
	m.ca = m.certs["member"].CA
	m.rogue = leaf(t, certstest.NewCA(t, "rogue-ca"), dir, "cairn-rogue")
	side := embedded.TLS{CertFile: m.certs["member"].Cert, KeyFile: m.certs["member"].Key, TrustedCAFile: m.ca, ClientCertAuth: true}
	var err error
	for range 5 { // a free port can be taken between probe and bind
		m.endpoint = fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t))
		m.Server, err = embedded.Start(embedded.Config{
			Name: "tls", Dir: filepath.Join(t.TempDir(), "etcd"), ListenClientURL: m.endpoint,
			ListenPeerURL: fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t)),
			ClientTLS:     side, PeerTLS: side, StartTimeout: 20 * time.Second,
			BcryptCost: 4, // bcrypt's cheapest: logins cost no CPU worth waiting for in tests
		})
		if err == nil {
			break
		}
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return m
}

// client connects to the member; the store is closed when t ends.
func (m *tlsMember) client(t *testing.T, cfg kv.EtcdConfig) *kv.EtcdStore {
	if len(cfg.Endpoints) == 0 {
		cfg.Endpoints = []string{m.endpoint}
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 20 * time.Second
	}
	cfg.DialTimeout = cfg.RequestTimeout
	s, err := kv.NewEtcdStore(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (m *tlsMember) withCert(cn string) kv.EtcdConfig {
	return kv.EtcdConfig{CACert: m.ca, Cert: m.certs[cn].Cert, Key: m.certs[cn].Key}
}

// refused asserts that a client cannot read or write, within a short bound.
func refused(t *testing.T, s *kv.EtcdStore, key, why string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := s.Get(ctx, key)
	require.Error(t, err, "read: %s", why)
	_, err2 := s.Put(ctx, key, []byte("x"), 0)
	require.Error(t, err2, "write: %s", why)
	return err
}

// A member with mTLS serves only clients presenting a certificate of its
// CA: no certificate, a certificate of another CA, no CA to verify the
// member and plain HTTP are all refused, and a refused client changed
// nothing.
func TestMemberServesMutualTLS(t *testing.T) {
	m := startTLSMember(t)
	good := m.client(t, m.withCert("cairn"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := good.Put(context.Background(), "/cairn/k", []byte("v"), 0)
		require.NoError(c, err)
	}, 30*time.Second, 100*time.Millisecond, "a client with a certificate of the CA writes")

	short := 2 * time.Second
	refused(t, m.client(t, kv.EtcdConfig{CACert: m.ca, RequestTimeout: short}), "/cairn/k", "no client certificate")
	refused(t, m.client(t, kv.EtcdConfig{CACert: m.ca, Cert: m.rogue.Cert, Key: m.rogue.Key, RequestTimeout: short}),
		"/cairn/k", "a certificate of another CA")
	refused(t, m.client(t, kv.EtcdConfig{Cert: m.certs["cairn"].Cert, Key: m.certs["cairn"].Key, RequestTimeout: short}),
		"/cairn/k", "the member's certificate not verified")
	plain := "http://" + m.endpoint[len("https://"):]
	refused(t, m.client(t, kv.EtcdConfig{Endpoints: []string{plain}, RequestTimeout: short}), "/cairn/k", "plain HTTP")

	kvp, err := good.Get(context.Background(), "/cairn/k")
	require.NoError(t, err)
	require.Equal(t, "v", string(kvp.Value), "the refused writes changed nothing")
}

// With etcd auth set up by SetupAuth, the Cairn user reads and writes its
// namespace and nothing else, by password or by its certificate's common
// name; a client with a valid certificate of another name, or with a wrong
// password, is refused; root still reads everything; running the setup
// again changes nothing.
func TestMemberAuthLimitsCairnToItsNamespace(t *testing.T) {
	m := startTLSMember(t)
	// Keys written before auth: one inside the namespace, one outside.
	anon := m.client(t, m.withCert("member"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := anon.Put(context.Background(), "/other/secret", []byte("s"), 0)
		require.NoError(c, err)
	}, 30*time.Second, 100*time.Millisecond)
	_, err := anon.Put(context.Background(), "/cairn/before", []byte("b"), 0)
	require.NoError(t, err)

	rootCfg := m.withCert("member")
	rootCfg.Username, rootCfg.Password = kv.RootUser, "r00t-pw"
	root := m.client(t, rootCfg)
	setup := kv.AuthSetup{RootPassword: "r00t-pw", User: "cairn", UserPassword: "cairn-pw", Namespace: "/cairn"}
	done, err := root.SetupAuth(context.Background(), setup)
	require.NoError(t, err)
	require.Contains(t, done, "create user root")
	require.Contains(t, done, "role cairn may read and write /cairn/*")
	require.Contains(t, done, "enable authentication")

	// The user by password (over a certificate of another name: the
	// password wins) and by certificate alone.
	byPassword := m.withCert("intruder")
	byPassword.Username, byPassword.Password, byPassword.Namespace = "cairn", "cairn-pw", "/cairn"
	certOnly := m.withCert("cairn")
	certOnly.Namespace = "/cairn"
	for name, cfg := range map[string]kv.EtcdConfig{"password": byPassword, "certificate": certOnly} {
		s := m.client(t, cfg)
		ctx := context.Background()
		_, err := s.Put(ctx, "/cairn/by-"+name, []byte("v"), 0)
		require.NoError(t, err, name)
		kvp, err := s.Get(ctx, "/cairn/before")
		require.NoError(t, err, name)
		require.Equal(t, "b", string(kvp.Value))
		_, _, err = s.Header(ctx)
		require.NoError(t, err, "%s: the cluster probe reads inside the namespace", name)
		_, err = s.Get(ctx, "/other/secret")
		require.ErrorIs(t, err, kv.ErrAccessDenied, "%s: read outside the namespace", name)
		_, err = s.Put(ctx, "/other/secret", []byte("overwritten"), 0)
		require.ErrorIs(t, err, kv.ErrAccessDenied, "%s: write outside the namespace", name)
		_, err = s.DeletePrefix(ctx, "/cairn")
		require.ErrorIs(t, err, kv.ErrAccessDenied, "%s: a range wider than the namespace", name)
	}

	// A valid certificate whose name is no user, and the anonymous client
	// of before, are refused everything.
	for name, s := range map[string]*kv.EtcdStore{"intruder": m.client(t, m.withCert("intruder")), "anonymous": anon} {
		err := refused(t, s, "/cairn/before", name)
		require.ErrorIs(t, err, kv.ErrAccessDenied, name)
	}
	wrong := m.withCert("cairn")
	wrong.Username, wrong.Password = "cairn", "guess"
	err = refused(t, m.client(t, wrong), "/cairn/before", "wrong password")
	require.ErrorIs(t, err, kv.ErrAccessDenied, "wrong password")

	// Root reads everything; the refused writes changed nothing; a second
	// setup succeeds (logged in as root now) and keeps the grants.
	ctx := context.Background()
	kvp, err := root.Get(ctx, "/other/secret")
	require.NoError(t, err)
	require.Equal(t, "s", string(kvp.Value))
	_, err = root.SetupAuth(ctx, setup)
	require.NoError(t, err)
	kvp, err = m.client(t, byPassword).Get(ctx, "/cairn/by-certificate")
	require.NoError(t, err)
	require.Equal(t, "v", string(kvp.Value))
}

// A URL's scheme and its TLS settings must agree, or the member refuses to
// start with a message naming the URL.
func TestMemberTLSNeedsHTTPS(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, t.TempDir(), "member")
	for name, cfg := range map[string]embedded.Config{
		"https without a certificate": {ListenClientURL: "https://127.0.0.1:1", ListenPeerURL: "http://127.0.0.1:2"},
		"a certificate on http": {ListenClientURL: "http://127.0.0.1:1", ListenPeerURL: "http://127.0.0.1:2",
			ClientTLS: embedded.TLS{CertFile: f.Cert, KeyFile: f.Key}},
		"peer https without a certificate": {ListenClientURL: "http://127.0.0.1:1", ListenPeerURL: "https://127.0.0.1:2"},
	} {
		cfg.Dir = t.TempDir()
		_, err := embedded.Start(cfg)
		require.ErrorContains(t, err, "https URL needs a certificate", name)
	}
}
