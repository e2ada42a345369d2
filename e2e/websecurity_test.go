package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrossOriginRefusedAndHeaders (issue 26 #5): on a node with no tokens
// (everything open), another site's page cannot create a database: its
// text/plain POST is refused, as is a text/plain body from any client; the
// database does not exist afterwards. Every /api/v1 answer, errors
// included, carries the CSP, anti-framing and no-sniff headers.
func TestCrossOriginRefusedAndHeaders(t *testing.T) {
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	base := "http://" + p.addr
	post := func(hdr ...string) *http.Response {
		req, err := http.NewRequest("POST", base+"/api/v1/databases", strings.NewReader(`{"name":"csrf","num_shards":1,"replica_factor":1}`))
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := p.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	// What a browser sends for a form or a no-cors fetch from another site.
	resp := post("Content-Type", "text/plain", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = post("Content-Type", "text/plain", "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = post("Content-Type", "text/plain")
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	code, _ := p.get("/api/v1/databases/csrf")
	require.Equal(t, http.StatusNotFound, code, "a refused request created the database")

	for _, path := range []string{"/api/v1/health", "/api/v1/ready", "/api/v1/databases", "/api/v1/databases/csrf", "/api/v1/nodes", "/"} {
		resp, err := p.client.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
	}
	resp = post("Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
}
