package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/stretchr/testify/require"
)

// TestHealthProbeTLS: against an HTTPS listener with a certificate of a test
// CA, the probe takes TLS from the node's environment (CAIRN_TLS_CERT) and
// verifies against the node's CA (chain only on loopback, so "localhost"
// works too); a wrong CA fails the probe, a CA file without certificates is
// a usage error naming it, and plain HTTP on the HTTPS port fails.
func TestHealthProbeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "health-ca")
	f := ca.WriteFiles(t, dir, "node")
	other := certstest.NewCA(t, "other-ca").WriteFiles(t, t.TempDir(), "x")
	certPEM, _ := os.ReadFile(f.Cert)
	keyPEM, _ := os.ReadFile(f.Key)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"ok","node_id":"n1"}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	_, port, _ := strings.Cut(addr, ":")
	notPEM := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("nothing"), 0o600))

	code, _, errOut := runArgs("health", "--addr", addr)
	require.Equal(t, 1, code, "plain HTTP to an HTTPS port")
	require.Contains(t, errOut, "400")

	t.Setenv("CAIRN_HTTP_ADDR", addr)
	t.Setenv("CAIRN_TLS_CERT", f.Cert)
	t.Setenv("CAIRN_TLS_KEY", f.Key)
	code, out, errOut := runArgs("health")
	require.Equal(t, 0, code, "TLS from the node's environment, loopback without a CA: %s", errOut)
	require.Equal(t, "ok n1\n", out)

	t.Setenv("CAIRN_TLS_CA", f.CA)
	for _, a := range []string{addr, "localhost:" + port} {
		code, out, errOut = runArgs("health", "--addr", a)
		require.Equal(t, 0, code, "%s verified against the node's CA: %s", a, errOut)
		require.Equal(t, "ok n1\n", out)
	}
	code, _, errOut = runArgs("health", "--tls-ca", other.CA)
	require.Equal(t, 1, code, "a certificate of another CA")
	require.Contains(t, errOut, "certificate")
	code, _, errOut = runArgs("health", "--tls-ca", notPEM)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, notPEM)
	code, _, _ = runArgs("health", "--tls=false")
	require.Equal(t, 1, code, "--tls=false probes plain HTTP")
}
