package certs

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/stretchr/testify/require"
)

func leafSerial(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	x, err := x509.ParseCertificate(c.Certificate[0])
	require.NoError(t, err)
	return x.Subject.CommonName
}

// The reloader serves the files' current pair: a renewed certificate is
// picked up on the next handshake, a broken one keeps the last good pair.
func TestReloaderPicksUpNewFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, dir, "node")
	r, err := NewReloader(f.Cert, f.Key)
	require.NoError(t, err)
	c, err := r.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "node", leafSerial(t, c))

	// Unchanged files: the same cached pair.
	c2, err := r.GetClientCertificate(nil)
	require.NoError(t, err)
	require.Same(t, c, c2)

	// Renewed files (a later mtime).
	cert, key := ca.Issue(t, "renewed")
	require.NoError(t, os.WriteFile(f.Cert, cert, 0o600))
	require.NoError(t, os.WriteFile(f.Key, key, 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(f.Cert, later, later))
	require.NoError(t, os.Chtimes(f.Key, later, later))
	c, err = r.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "renewed", leafSerial(t, c))

	// A half-written pair keeps the last good one and reports why.
	require.NoError(t, os.WriteFile(f.Key, []byte("garbage"), 0o600))
	even := later.Add(time.Minute)
	require.NoError(t, os.Chtimes(f.Key, even, even))
	c, err = r.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "renewed", leafSerial(t, c))
	require.Error(t, r.LastError())
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(Config{CertFile: filepath.Join(dir, "no.pem"), KeyFile: filepath.Join(dir, "no-key.pem")})
	require.ErrorIs(t, err, os.ErrNotExist)
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, dir, "node")
	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
	_, err = Load(Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: bad})
	require.ErrorIs(t, err, ErrNoCerts)
	_, err = Load(Config{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: bad})
	require.ErrorIs(t, err, ErrNoCerts)
}

// A real handshake: the client verifies the server against --tls-ca and
// presents its own certificate; the server verifies it when given and
// accepts clients without one.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, dir, "node")
	m, err := Load(Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, ClientCAFile: f.CA})
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.Server)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			_, _ = io.WriteString(w, "verified:"+r.TLS.VerifiedChains[0][0].Subject.CommonName)
			return
		}
		_, _ = io.WriteString(w, "anonymous")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "https://" + ln.Addr().String()

	get := func(cfg *tls.Config) (string, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	got, err := get(m.Client)
	require.NoError(t, err)
	require.Equal(t, "verified:node", got)
	got, err = get(ca.ClientTLS(t, ""))
	require.NoError(t, err)
	require.Equal(t, "anonymous", got)
	// A certificate from another CA is refused at the handshake.
	other := certstest.NewCA(t, "other")
	cfg := other.ClientTLS(t, "intruder")
	cfg.RootCAs = ca.Pool()
	intruder := cfg.Certificates[0]
	// Forced: by itself a client sends no certificate the server's CA list
	// does not name.
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &intruder, nil }
	_, err = get(cfg)
	require.Error(t, err)
	// A client that does not trust the CA refuses the server.
	_, err = get(other.ClientTLS(t, ""))
	require.Error(t, err)
}

// A running HTTPS server serves a renewed certificate to new connections
// without a restart.
func TestServerPicksUpRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, dir, "node")
	m, err := Load(Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.Server)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	served := func() string {
		conn, err := tls.Dial("tcp", ln.Addr().String(), m.Client)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.Handshake())
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	require.Equal(t, "node", served())
	cert, key := ca.Issue(t, "renewed")
	require.NoError(t, os.WriteFile(f.Cert, cert, 0o600))
	require.NoError(t, os.WriteFile(f.Key, key, 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(f.Cert, later, later))
	require.NoError(t, os.Chtimes(f.Key, later, later))
	require.Equal(t, "renewed", served())
}
