package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// TestCrossSiteRequestsRefused: a page on another origin cannot make a
// browser create a database or write (forms send text/plain without a
// preflight; fetch says where it comes from), while the node's own console
// and non-browser clients keep working.
func TestCrossSiteRequestsRefused(t *testing.T) {
	admin, data := &fakeAdmin{}, &fakeData{}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: admin, data: data}}).Handler()
	const db = `{"name":"x","num_shards":1,"replica_factor":1}`
	send := func(method, path, body string, hdr ...string) (int, http.Header) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Host = "node:9000"
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Header()
	}
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"a form post from another site", []string{"Content-Type", "text/plain", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403},
		{"text/plain from another origin (old browser)", []string{"Content-Type", "text/plain", "Origin", "https://evil.example"}, 403},
		{"JSON from another port of the same host", []string{"Content-Type", "application/json", "Origin", "http://node:8080", "Sec-Fetch-Site", "same-site"}, 403},
		{"a sandboxed page", []string{"Content-Type", "application/json", "Origin", "null"}, 403},
		{"text/plain without an origin (curl)", []string{"Content-Type", "text/plain"}, 415},
		{"a form encoding", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"no content type", nil, 415},
	} {
		code, hdr := send("POST", "/api/v1/databases", db, tc.hdr...)
		require.Equal(t, tc.want, code, tc.name)
		require.Equal(t, "DENY", hdr.Get("X-Frame-Options"), tc.name)
	}
	require.Empty(t, admin.calls, "a refused request reached the admin service")

	code, _ := send("POST", "/write?db=x", "m value=1", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, 403, code)
	code, _ = send("POST", "/api/v1/write?db=x", "m value=1", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, 403, code)
	require.Zero(t, data.writes)

	// The node's own console, and clients that send JSON or line protocol.
	code, _ = send("POST", "/api/v1/databases", db, "Content-Type", "application/json; charset=utf-8", "Origin", "http://node:9000", "Sec-Fetch-Site", "same-origin")
	require.Equal(t, 201, code)
	code, _ = send("POST", "/api/v1/databases", db, "Content-Type", "application/json")
	require.Equal(t, 201, code)
	code, _ = send("POST", "/api/v1/write?db=x", "m value=1", "Content-Type", "text/plain")
	require.Equal(t, 204, code)
	// Reads are not state-changing: another origin's GET is answered (the
	// browser keeps the answer from the page: no CORS headers).
	code, _ = send("GET", "/api/v1/databases", "", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, 200, code)
	require.Equal(t, []string{"db:x", "db:x"}, admin.calls)
	require.Equal(t, 1, data.writes)
}

// TestSecurityHeadersOnEveryAnswer: API answers, errors, the console and
// unknown paths all carry the CSP, anti-framing and no-sniff headers.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}}, Tokens: web.Tokens{Admin: "adm"},
		Console: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })}).Handler()
	for _, path := range []string{"/api/v1/health", "/api/v1/databases", "/api/v1/nope", "/", "/console/console.js", "/metrics"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		require.Contains(t, w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		require.Contains(t, w.Header().Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Equal(t, "DENY", w.Header().Get("X-Frame-Options"), path)
		require.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), path)
	}
}
