package e2e

import (
	"crypto/tls"
	"net/http"
	"os"
	"sync"
	"time"
)

// testTLS, when set, is the client TLS setup of the test HTTP clients: the
// cluster under test serves HTTPS (security_test.go sets it).
var testTLS struct {
	sync.Mutex
	cfg *tls.Config
}

func setTestTLS(cfg *tls.Config) {
	testTLS.Lock()
	defer testTLS.Unlock()
	testTLS.cfg = cfg
}

// testClient is the HTTP client of the harness: it follows the cluster
// under test's security settings, so every existing test runs unchanged
// against a secured cluster. With CAIRN_ADMIN_TOKEN in the environment it
// sends that token on requests that carry none; with testTLS set it speaks
// https (http:// URLs are upgraded) and trusts the test CA.
func testClient(timeout time.Duration) *http.Client {
	testTLS.Lock()
	cfg := testTLS.cfg
	testTLS.Unlock()
	base := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	if cfg != nil {
		base.TLSClientConfig = cfg.Clone()
	}
	return &http.Client{Timeout: timeout, Transport: &testTransport{base: base, https: cfg != nil, token: os.Getenv("CAIRN_ADMIN_TOKEN")}}
}

type testTransport struct {
	base  http.RoundTripper
	https bool
	token string
}

func (t *testTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if t.https && out.URL.Scheme == "http" {
		out.URL.Scheme = "https"
	}
	if t.token != "" && out.Header.Get("Authorization") == "" {
		out.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(out)
}
