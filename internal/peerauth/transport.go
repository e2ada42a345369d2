package peerauth

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// TransportConfig configures the client side of node-to-node calls.
type TransportConfig struct {
	// Base sends the requests; http.DefaultTransport when nil.
	Base http.RoundTripper
	// Secret signs every request when set.
	Secret string
	// HTTPS upgrades http:// peer URLs to https:// : node records carry
	// host:port, and the scheme follows the cluster's TLS setting.
	HTTPS bool
	// Logger reports peers that refuse this node's proof (rate limited).
	Logger *zap.Logger
	// Now is the signing clock; time.Now when nil.
	Now func() time.Time
	// ProofVersion is the proof version node accepts, from the protocol
	// its record advertises: V1 for a node of release 0.1.0, V2 for one of
	// protocol 2, V3 (or 0: unknown) otherwise. nil: V3 always.
	ProofVersion func(node string) int
}

// ErrNoTarget: a request to sign names no target node (ToNode). Every
// node-to-node call addresses a node it knows by id; a request without one
// is a wiring mistake and is not sent.
var ErrNoTarget = errors.New("peerauth: node-to-node request names no target node id")

// Transport is an http.RoundTripper for node-to-node requests: it signs each
// request with the cluster secret, picks the scheme, and logs (at most once a
// minute per peer and cause) when a peer refuses the proof, naming the cause.
type Transport struct {
	base  http.RoundTripper
	key   []byte
	https bool
	lg    *zap.Logger
	now   func() time.Time
	limit *Limiter
	vers  func(node string) int
}

// NewTransport builds the signing transport.
func NewTransport(cfg TransportConfig) *Transport {
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Transport{base: cfg.Base, key: Key(cfg.Secret), https: cfg.HTTPS, lg: cfg.Logger,
		now: cfg.Now, limit: NewLimiter(time.Minute, cfg.Now), vers: cfg.ProofVersion}
}

// RoundTrip implements http.RoundTripper. It never modifies req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if t.https && out.URL.Scheme == "http" {
		out.URL.Scheme = "https"
	}
	if t.key != nil {
		node := targetOf(req.Context())
		if node == "" {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, ErrNoTarget
		}
		v := V3
		if t.vers != nil {
			v = t.vers(node) // what the peer's release signs and checks
		}
		body, err := t.readBody(req)
		if req.Body != nil {
			// RoundTrip owns the caller's body; out sends a copy.
			_ = req.Body.Close()
		}
		if err != nil {
			return nil, err
		}
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			out.ContentLength = int64(len(body))
		}
		SignRequest(t.key, out, v, node, body, t.now())
	}
	resp, err := t.base.RoundTrip(out)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		t.logRefusal(out, resp.Header.Get(HeaderError))
	}
	return resp, err
}

// readBody returns the bytes req sends, leaving req.Body usable: a body with
// GetBody (bytes and strings readers) is read from a copy, any other one is
// consumed and replaced.
func (t *Transport) readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	rc := req.Body
	if req.GetBody != nil {
		c, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		rc = c
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (t *Transport) logRefusal(req *http.Request, cause string) {
	if !t.limit.Allow(req.URL.Host + " " + cause) {
		return
	}
	hint := "the peer refused this node's request to its internal API"
	switch cause {
	case "missing":
		hint = "the peer requires a cluster secret and this node has none: set --cluster-secret-file or CAIRN_CLUSTER_SECRET"
	case "bad_signature":
		hint = "the peer refused this node's cluster secret proof: the nodes' cluster secrets differ"
	case "stale":
		hint = "the peer refused this node's proof as out of date: the nodes' clocks differ by more than the skew window (5m back, 5s ahead)"
	case "wrong_node":
		hint = "the peer is not the node this request was signed for: its node id differs from the one in its record, or its --advertise-addr from the address this node dialed"
	case "unbound":
		hint = "the peer refused a version 1 or 2 proof (not bound to its node id): this node took the peer for a node of release 0.1.0 or of protocol 2, or the peer sees none of them live any more"
	case "replayed":
		hint = "the peer saw this exact request before (a replay, or a retried request)"
	case "client_cert":
		hint = "the peer requires a client certificate signed by its --tls-client-ca: set --tls-cert/--tls-key on this node"
	case "body_mismatch", "malformed":
		hint = "the peer refused this node's proof as malformed (different Cairn versions?)"
	}
	t.lg.Error("cannot authenticate to peer; replication with it will not work until fixed",
		zap.String("peer", req.URL.Host), zap.String("path", req.URL.Path), zap.String("cause", cause), zap.String("hint", hint))
}

// Limiter allows one event per key per interval (log rate limiting). It
// keeps at most 1024 keys: past that it forgets them all, so a flood of
// distinct keys costs bounded memory and only more log lines.
type Limiter struct {
	mu    sync.Mutex
	every time.Duration
	now   func() time.Time
	last  map[string]time.Time
}

// NewLimiter allows one event per key per every.
func NewLimiter(every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, now: now, last: map[string]time.Time{}}
}

// Allow reports whether an event for key may happen now, and records it.
func (l *Limiter) Allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if at, ok := l.last[key]; ok && now.Sub(at) < l.every {
		return false
	}
	if len(l.last) >= 1024 {
		clear(l.last)
	}
	l.last[key] = now
	return true
}
