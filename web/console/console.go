// Package console holds Cairn's web console: one HTML page, a stylesheet and a
// script, embedded in the binary so an operator needs nothing but the node's
// HTTP address. The page talks only to the public JSON API under /api/v1.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"path"
	"sync"
	"time"
)

// FS holds the console assets: index.html, console.css, shardmap.js,
// progress.js and console.js, and the charts (charts.js, charts.css) with the uPlot library
// they draw with (MIT, see uPlot.LICENSE).
//
//go:embed index.html console.css shardmap.js progress.js console.js
//go:embed charts.js charts.css uPlot.iife.min.js uPlot.min.css
var FS embed.FS

// AssetPrefix is the URL path under which the stylesheet and script are served.
const AssetPrefix = "/console/"

// chartAssets are the files of the Charts tab.
var chartAssets = []string{"charts.js", "charts.css", "uPlot.iife.min.js", "uPlot.min.css"}

// asset is one embedded file with its content hash, used as the ETag so a
// browser revalidates cheaply and never runs a script older than the binary.
type asset struct {
	body []byte
	etag string
}

// loadAssets reads every served file once. Only the names listed here are
// ever served, whatever else might later be embedded.
var loadAssets = sync.OnceValue(func() map[string]asset {
	out := make(map[string]asset)
	for _, name := range append([]string{"index.html", "console.css", "shardmap.js", "progress.js", "console.js"}, chartAssets...) {
		b, err := FS.ReadFile(name)
		if err != nil {
			continue // cannot happen for embedded names; the file is then a 404
		}
		sum := sha256.Sum256(b)
		out[name] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
})

// Handler serves the console page at "/" (and "/index.html") and its assets
// under AssetPrefix. Every other path is 404, so a mistyped API path routed to
// it does not come back as a page of HTML.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := ""
	switch p := r.URL.Path; {
	case p == "/" || p == "/index.html":
		name = "index.html"
	case path.Dir(p)+"/" == AssetPrefix && path.Base(p) != "index.html":
		name = path.Base(p)
	}
	a, ok := loadAssets()[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// ServeContent picks the Content-Type from the name's extension and
	// answers If-None-Match with 304.
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
