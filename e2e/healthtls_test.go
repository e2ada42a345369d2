package e2e

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/stretchr/testify/require"
)

// TestHealthCommandTLS: `cairn health` (the image's HEALTHCHECK) against a
// real node serving HTTPS, with nothing but the node's own environment: it
// probes over TLS, verified against the node's CA; it fails against a CA
// that did not issue the node's certificate, and over plain HTTP.
func TestHealthCommandTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "cairn-health-ca")
	f := ca.WriteFiles(t, dir, "node")
	other := certstest.NewCA(t, "other-ca").WriteFiles(t, t.TempDir(), "x")
	t.Setenv("CAIRN_TLS_CERT", f.Cert)
	t.Setenv("CAIRN_TLS_KEY", f.Key)
	t.Setenv("CAIRN_TLS_CA", f.CA)
	setTestTLS(ca.ClientTLS(t, ""))
	t.Cleanup(func() { setTestTLS(nil) })
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/health", 200, 20*time.Second)

	health := func(args ...string) (int, string) {
		cmd := exec.Command(cairnBin, append([]string{"health"}, args...)...)
		cmd.Env = append(os.Environ(), "CAIRN_HTTP_ADDR="+p.addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			return ee.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	code, out := health()
	require.Equal(t, 0, code, "the node's environment alone: %s", out)
	require.Contains(t, out, "ok ")
	code, out = health("--tls-ca", other.CA)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "certificate")
	code, out = health("--tls=false")
	require.Equal(t, 1, code, "plain HTTP on the HTTPS port: %s", out)
}
