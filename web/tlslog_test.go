package web_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/certs"
	"github.com/cairn-db/cairn/internal/certs/certstest"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestTLSSuitesAndHandshakeLog (issue 26 #7): over HTTPS a TLS 1.2 client
// offering only CBC-SHA1 suites is refused while an AEAD one is served, and
// handshake failures reach the structured log, one line a minute per cause
// however many clients fail.
func TestTLSSuitesAndHandshakeLog(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	f := ca.WriteFiles(t, t.TempDir(), "node")
	m, err := certs.Load(certs.Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	require.NoError(t, err)
	core, logs := observer.New(zapcore.WarnLevel)
	s := startServer(t, web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}}, TLS: m.Server, Logger: zap.New(core)})

	get := func(cfg *tls.Config) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		resp, err := c.Get("https://" + s.Addr() + "/api/v1/health")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	cfg := ca.ClientTLS(t, "")
	cfg.MaxVersion = tls.VersionTLS12
	cfg.CipherSuites = []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	require.NoError(t, get(cfg))
	cfg = ca.ClientTLS(t, "")
	cfg.MaxVersion = tls.VersionTLS12
	cfg.CipherSuites = []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_128_CBC_SHA}
	require.Error(t, get(cfg))

	// Clients that speak plaintext to the TLS port.
	for range 5 {
		conn, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_, _ = conn.Read(make([]byte, 512))
		conn.Close()
	}
	require.Eventually(t, func() bool {
		return len(logs.FilterField(zap.String("kind", "tls_handshake")).All()) >= 2
	}, 5*time.Second, 10*time.Millisecond)
	byCause := map[string]int{}
	for _, e := range logs.FilterField(zap.String("kind", "tls_handshake")).All() {
		byCause[e.ContextMap()["cause"].(string)]++
		require.NotEmpty(t, e.ContextMap()["remote"])
	}
	for cause, n := range byCause {
		require.Equal(t, 1, n, "cause %q logged more than once a minute", cause)
	}
	require.Len(t, byCause, 2, "the cipher mismatch and the plaintext client: %v", byCause)
}
