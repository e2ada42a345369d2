package kv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// writeCerts makes a CA and a server certificate for 127.0.0.1 in dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cairn test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// The etcd client options (--etcd-cacert and --etcd-username/--etcd-password)
// against a real etcd serving TLS with authentication enabled. Every call has
// a generous bounded deadline and the first ones after a configuration change
// are retried: on a loaded machine a TLS handshake plus an authentication
// round can take seconds, and that is not what this test is about.
func TestEtcdStoreTLSAndAuth(t *testing.T) {
	const (
		callTimeout = 20 * time.Second // one call that must succeed
		settle      = 60 * time.Second // retrying until etcd accepts
	)
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	cu, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t)))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t)))
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "tls", filepath.Join(dir, "etcd")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = "tls=" + pu.String()
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = cert, key
	cfg.Logger, cfg.ZapLoggerBuilder = "zap", embed.NewZapLoggerBuilder(zap.NewNop())
	// The cheapest password hashing: bcrypt at the default cost takes
	// seconds of CPU per authentication under -race on a busy machine.
	cfg.BcryptCost = 4 // bcrypt's minimum cost
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(settle):
		t.Fatal("etcd not ready")
	}

	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), callTimeout)
	}
	// Enable authentication with a root user, over TLS. Each step is
	// idempotent enough to retry: a user that exists already is fine.
	admin, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{cu.String()}, CACert: ca,
		DialTimeout: callTimeout, RequestTimeout: callTimeout})
	require.NoError(t, err)
	cli := kv.EtcdClient(admin)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := call()
		defer cancel()
		if _, err := cli.UserGet(ctx, "root"); err != nil {
			_, err = cli.UserAdd(ctx, "root", "s3cret")
			require.NoError(c, err)
		}
		_, err := cli.UserGrantRole(ctx, "root", "root")
		require.NoError(c, err)
		_, err = cli.AuthEnable(ctx)
		require.NoError(c, err)
	}, settle, 200*time.Millisecond, "enabling authentication over TLS")
	require.NoError(t, admin.Close())

	good, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{cu.String()}, CACert: ca,
		Username: "root", Password: "s3cret", DialTimeout: callTimeout, RequestTimeout: callTimeout})
	require.NoError(t, err)
	defer good.Close()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := call()
		defer cancel()
		_, err := good.Put(ctx, "/tls/k", []byte("v"), 0)
		require.NoError(c, err)
	}, settle, 200*time.Millisecond, "first authenticated write over TLS")
	ctx, cancel := call()
	defer cancel()
	kvp, err := good.Get(ctx, "/tls/k")
	require.NoError(t, err)
	require.Equal(t, "v", string(kvp.Value))

	// Without credentials etcd refuses; without the CA the TLS handshake
	// fails (the short timeout only shortens the wait for that refusal).
	anon, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{cu.String()}, CACert: ca,
		DialTimeout: callTimeout, RequestTimeout: callTimeout})
	require.NoError(t, err)
	defer anon.Close()
	_, err = anon.Put(context.Background(), "/tls/k", []byte("x"), 0)
	require.Error(t, err)
	require.NotErrorIs(t, err, kv.ErrUnavailable, "etcd itself refuses a client without credentials")
	untrusted, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{cu.String()}, RequestTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer untrusted.Close()
	_, err = untrusted.Get(context.Background(), "/tls/k")
	require.Error(t, err)
	ctx2, cancel2 := call()
	defer cancel2()
	kvp, err = good.Get(ctx2, "/tls/k")
	require.NoError(t, err)
	require.Equal(t, "v", string(kvp.Value), "refused writes changed nothing")
}
