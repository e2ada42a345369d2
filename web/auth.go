package web

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// Scope is what a token allows; a wider scope includes the narrower ones
// (admin > write > read).
type Scope int

// Scopes, narrowest first.
const (
	ScopeRead Scope = iota + 1
	ScopeWrite
	ScopeAdmin
)

func (s Scope) String() string {
	switch s {
	case ScopeRead:
		return "read"
	case ScopeWrite:
		return "write"
	case ScopeAdmin:
		return "admin"
	}
	return "none"
}

// ErrForbidden: the caller proved a token, but of a narrower scope (403).
var ErrForbidden = models.ErrForbidden

// Tokens are the API tokens of a node. A scope is open (as before tokens
// existed) when its token is unset, with one exception kept from the days of
// the single admin token: writes need the admin token when only that one is
// set.
type Tokens struct {
	Admin, Write, Read string
}

// open reports whether scope s needs no token.
func (t Tokens) open(s Scope) bool {
	switch s {
	case ScopeAdmin:
		return t.Admin == ""
	case ScopeWrite:
		return t.Write == "" && t.Admin == ""
	}
	return t.Read == ""
}

// grant is the widest scope cred proves (0 for none), compared in constant
// time against every token.
func (t Tokens) grant(cred string) Scope {
	match := func(tok string) bool {
		return tok != "" && subtle.ConstantTimeCompare([]byte(cred), []byte(tok)) == 1
	}
	admin, write, read := match(t.Admin), match(t.Write), match(t.Read)
	switch {
	case admin:
		return ScopeAdmin
	case write:
		return ScopeWrite
	case read:
		return ScopeRead
	}
	return 0
}

// Credential is the token a request carries, in any of the forms API and
// InfluxDB clients send: "Authorization: Bearer X", "Authorization: Token X"
// (InfluxDB 2.x), the basic-auth password (InfluxDB 1.x, Grafana) or the
// p= query parameter (InfluxDB 1.x). Empty when there is none.
func Credential(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, _ := strings.Cut(h, " ")
		switch {
		case strings.EqualFold(scheme, "Bearer"), strings.EqualFold(scheme, "Token"):
			return strings.TrimSpace(rest)
		case strings.EqualFold(scheme, "Basic"):
			if _, pw, ok := r.BasicAuth(); ok {
				return pw
			}
		}
	}
	return r.URL.Query().Get("p")
}

// Allow decides a request for scope s: nil, or an error wrapping
// models.ErrUnauthorized (no or unknown token: 401) or ErrForbidden (a token
// of a narrower scope: 403).
func (t Tokens) Allow(r *http.Request, s Scope) error {
	if t.open(s) {
		return nil
	}
	cred := Credential(r)
	if cred == "" {
		return fmt.Errorf("%w: this endpoint needs a %s token (Authorization: Bearer <token>)", models.ErrUnauthorized, s)
	}
	g := t.grant(cred)
	switch {
	case g == 0:
		return fmt.Errorf("%w: the token is not valid on this node", models.ErrUnauthorized)
	case g < s:
		return fmt.Errorf("%w: a %s token cannot call this endpoint; it needs a %s token", ErrForbidden, g, s)
	}
	return nil
}

// AllowStatement is influx.Config.Authorize over these tokens: /query is
// mounted with the read scope, and an InfluxQL statement that changes
// metadata (admin true: CREATE DATABASE, retention policies) needs the
// admin scope, one that changes data the write scope.
func (t Tokens) AllowStatement(r *http.Request, admin bool) error {
	if admin {
		return t.Allow(r, ScopeAdmin)
	}
	return t.Allow(r, ScopeWrite)
}

// RequireScope is middleware that lets a request through only with a token
// of scope s or wider (unless s is open; see Tokens). Use it on every route
// you add:
//
//	e.POST("/api/v2/write", web.RequireScope(tokens, web.ScopeWrite), handler)
//
// or, inside package web, s.RequireScope(web.ScopeWrite).
func RequireScope(t Tokens, s Scope) gin.HandlerFunc {
	return RequireScopeAs(t, s, func(c *gin.Context, _ int, err error) { fail(c, err) })
}

// RequireScopeAs is RequireScope for a foreign protocol: a refusal (status
// 401 or 403) is answered by refuse in that protocol's error shape, so its
// stock clients surface the message (the InfluxDB endpoints).
func RequireScopeAs(t Tokens, s Scope, refuse func(c *gin.Context, status int, err error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := t.Allow(c.Request, s); err != nil {
			c.Header("WWW-Authenticate", `Bearer realm="cairn"`)
			refuse(c, StatusOf(err), err)
			c.Abort()
			return
		}
		c.Next()
	}
}

// RequireScope guards a route of this server with its tokens.
func (s *Server) RequireScope(sc Scope) gin.HandlerFunc { return RequireScope(s.cfg.Tokens, sc) }
