package web

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// contentSecurityPolicy lets the console load its own scripts, styles and
// data only: no inline script, no framing, no form posted elsewhere.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders marks every answer, errors included: the console may not
// be framed (clickjacking), answers are not content-sniffed into scripts,
// and pages run only the console's own code.
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	c.Next()
}

// refuseCrossSite refuses state-changing requests another site's page makes
// a browser send. Browsers send such requests without asking first (CORS
// preflight) when they look like a form: a text/plain POST carries the
// user's network position and any basic-auth credentials, so it could
// create or drop a database on an open node. Browsers say where a request
// comes from (Sec-Fetch-Site, Origin): anything but this node itself is
// refused. Non-browser clients send neither and are not affected. A JSON
// API body must also say it is JSON, which a form cannot.
func refuseCrossSite(c *gin.Context) {
	r := c.Request
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		c.Next()
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		fail(c, fmt.Errorf("%w: cross-site %s refused (Sec-Fetch-Site: %s): use the console this node serves, or a non-browser client",
			models.ErrForbidden, r.Method, site))
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if u, err := url.Parse(origin); err != nil || !strings.EqualFold(u.Host, r.Host) {
			fail(c, fmt.Errorf("%w: cross-origin %s from %q refused: use the console this node serves, or a non-browser client",
				models.ErrForbidden, r.Method, origin))
			return
		}
	}
	c.Next()
}

// requireJSON refuses a JSON API body that does not say it is JSON: a
// browser form (text/plain, urlencoded, multipart) cannot send
// application/json to another origin without a CORS preflight, which this
// server never grants.
func requireJSON(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fmt.Errorf("%w: %s %s takes a JSON body: send Content-Type: application/json", models.ErrMediaType, r.Method, r.URL.Path)
	}
	return nil
}
