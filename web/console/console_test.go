package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, srv *httptest.Server, method, p string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+p, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestHandlerServesAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()

	cases := []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `id="shard-map"`},
		{"/console/console.css", "text/css; charset=utf-8", "--leader"},
		{"/console/console.js", "text/javascript; charset=utf-8", "/api/v1"},
		{"/console/shardmap.js", "text/javascript; charset=utf-8", "CairnShardMap"},
		{"/console/progress.js", "text/javascript; charset=utf-8", "CairnProgress"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			resp, body := get(t, srv, http.MethodGet, c.path, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, c.ctype, resp.Header.Get("Content-Type"))
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			require.Contains(t, body, c.contains)

			etag := resp.Header.Get("ETag")
			require.NotEmpty(t, etag)
			again, body := get(t, srv, http.MethodGet, c.path, map[string]string{"If-None-Match": etag})
			require.Equal(t, http.StatusNotModified, again.StatusCode)
			require.Empty(t, body)

			head, body := get(t, srv, http.MethodHead, c.path, nil)
			require.Equal(t, http.StatusOK, head.StatusCode)
			require.Empty(t, body)
		})
	}
}

func TestHandlerPageReferencesServedAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	_, page := get(t, srv, http.MethodGet, "/", nil)
	for _, ref := range []string{`href="/console/console.css"`, `src="/console/shardmap.js"`, `src="/console/progress.js"`, `src="/console/console.js"`} {
		require.Contains(t, page, ref)
	}
}

func TestHandlerRejectsOtherPaths(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, p := range []string{"/console/", "/console/index.html", "/console/missing.js", "/console.js",
		"/api/v1/unknown", "/console/../console.go", "/other/console.js"} {
		resp, _ := get(t, srv, http.MethodGet, p, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	resp, _ := get(t, srv, http.MethodPost, "/", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}

func TestAssetsStaySmallAndSelfContained(t *testing.T) {
	total, vendored := 0, 0
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(FS, p)
		require.NoError(t, err)
		if strings.HasPrefix(p, "uPlot.") { // the charting library, vendored as published
			vendored += len(b)
		} else {
			total += len(b)
		}
		// No CDN or remote fonts: the console must work on an air-gapped network.
		require.NotContains(t, string(b), "http://", p)
		require.NotContains(t, string(b), "https://", p)
		return nil
	})
	require.NoError(t, err)
	// 60 KB until the replica progress panel (progress.js, ~10 KB) came.
	require.Less(t, total, 72*1024, "console assets must stay under 72 KB")
	require.Less(t, vendored, 64*1024, "the vendored uPlot must stay under 64 KB")
	page, err := fs.ReadFile(FS, "index.html")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(page), "<script"))
}
