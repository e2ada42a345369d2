package peerauth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fixed(at time.Time) func() time.Time { return func() time.Time { return at } }

// signed builds a request signed with secret at time at.
func signed(t *testing.T, secret, method, target string, body []byte, at time.Time) *http.Request {
	t.Helper()
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	SignRequest(Key(secret), req, V3, "n1", body, at)
	return req
}

func TestVerifyRequest(t *testing.T) {
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Now: fixed(t0)})
	body := []byte("entry bytes")
	cases := []struct {
		name   string
		req    func() *http.Request
		want   error
		cause  string
		bodyOK bool
	}{
		{name: "valid", req: func() *http.Request {
			return signed(t, "s3cret", "POST", "/internal/v1/shards/db/0/write?term=3", body, t0)
		}, bodyOK: true},
		{name: "valid no body", req: func() *http.Request {
			return signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/log?term=3&after=9", nil, t0)
		}},
		{name: "valid within skew", req: func() *http.Request {
			return signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/snapshot?term=1", nil, t0.Add(-4*time.Minute))
		}},
		{name: "missing", req: func() *http.Request {
			return httptest.NewRequest("POST", "/internal/v1/shards/db/0/write?term=3", bytes.NewReader(body))
		}, want: ErrMissing, cause: "missing"},
		{name: "wrong secret", req: func() *http.Request {
			return signed(t, "other", "POST", "/internal/v1/shards/db/0/write?term=3", body, t0)
		}, want: ErrBadSignature, cause: "bad_signature"},
		{name: "stale", req: func() *http.Request {
			return signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/query?metric=m", nil, t0.Add(-6*time.Minute))
		}, want: ErrStale, cause: "stale"},
		{name: "future", req: func() *http.Request {
			return signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/query?metric=m", nil, t0.Add(6*time.Second))
		}, want: ErrStale},
		{name: "other method", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/leave?term=3&node=n1", nil, t0)
			r.Method = "POST"
			return r
		}, want: ErrBadSignature},
		{name: "other query", req: func() *http.Request {
			r := signed(t, "s3cret", "POST", "/internal/v1/shards/db/0/leave?term=3&node=n1", nil, t0)
			r2 := httptest.NewRequest("POST", "/internal/v1/shards/db/0/leave?term=3&node=n2", nil)
			r2.Header = r.Header
			return r2
		}, want: ErrBadSignature},
		{name: "other path", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/internal/v1/shards/db/0/query", nil, t0)
			r2 := httptest.NewRequest("GET", "/internal/v1/shards/db/1/query", nil)
			r2.Header = r.Header
			return r2
		}, want: ErrBadSignature},
		{name: "body swapped", req: func() *http.Request {
			r := signed(t, "s3cret", "POST", "/internal/v1/shards/db/0/write?term=3", body, t0)
			r.Body = io.NopCloser(strings.NewReader("injected points"))
			return r
		}, want: ErrBodyMismatch, cause: "body_mismatch"},
		{name: "bad date", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/x", nil, t0)
			r.Header.Set(HeaderDate, "yesterday")
			return r
		}, want: ErrMalformed, cause: "malformed"},
		{name: "uppercase signature", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/x", nil, t0)
			r.Header.Set(HeaderSignature, strings.ToUpper(r.Header.Get(HeaderSignature)))
			return r
		}, want: ErrMalformed},
		{name: "short digest", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/x", nil, t0)
			r.Header.Set(HeaderDigest, "abcd")
			return r
		}, want: ErrMalformed},
		{name: "signature only", req: func() *http.Request {
			r := signed(t, "s3cret", "GET", "/x", nil, t0)
			r.Header.Del(HeaderDate)
			r.Header.Del(HeaderDigest)
			return r
		}, want: ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req()
			err := v.VerifyRequest(r)
			if tc.want == nil {
				require.NoError(t, err)
				got, rerr := io.ReadAll(r.Body)
				require.NoError(t, rerr)
				if tc.bodyOK {
					require.Equal(t, body, got, "the handler must still see the body")
				}
				return
			}
			require.ErrorIs(t, err, tc.want)
			if tc.cause != "" {
				require.Equal(t, tc.cause, Cause(err))
			}
		})
	}
}

// A request whose headers fail is refused without its body being read.
func TestVerifyRequestReadsNoBodyBeforeHeaders(t *testing.T) {
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Now: fixed(t0)})
	r := signed(t, "other", "POST", "/internal/v1/shards/db/0/write", []byte("abc"), t0)
	rd := &countingReader{r: strings.NewReader("abc")}
	r.Body = io.NopCloser(rd)
	require.ErrorIs(t, v.VerifyRequest(r), ErrBadSignature)
	require.Zero(t, rd.n)
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestKeyAndSign(t *testing.T) {
	require.Nil(t, Key(""))
	require.NotEqual(t, Key("a"), Key("b"))
	require.Len(t, Key("a"), 32)
	p := Proof{Node: "n1", Method: "GET", Host: "n1:9000", RequestURI: "/x?y=1", Date: "1", Nonce: "00", Digest: Digest(nil)}
	s := Sign(Key("a"), p)
	require.True(t, strings.HasPrefix(s, "v3="))
	for _, change := range []func(*Proof){
		func(p *Proof) { p.Node = "n2" },
		func(p *Proof) { p.Method = "POST" },
		func(p *Proof) { p.Host = "n2:9000" },
		func(p *Proof) { p.RequestURI = "/x?y=2" },
		func(p *Proof) { p.Date = "2" },
		func(p *Proof) { p.Nonce = "01" },
		func(p *Proof) { p.Digest = Digest([]byte("b")) },
	} {
		q := p
		change(&q)
		require.NotEqual(t, s, Sign(Key("a"), q))
	}
	v2 := p
	v2.Version = V2
	require.True(t, strings.HasPrefix(Sign(Key("a"), v2), "v2="))
	v2.Node = "n2"
	require.Equal(t, Sign(Key("a"), v2), Sign(Key("a"), Proof{Version: V2, Node: "n1", Method: "GET", Host: "n1:9000",
		RequestURI: "/x?y=1", Date: "1", Nonce: "00", Digest: Digest(nil)}), "version 2 signs no node id")
	// Field boundaries are unambiguous: moving a byte between fields changes
	// the signature.
	require.NotEqual(t, Sign(Key("a"), Proof{Node: "n", Method: "GE", Host: "h", RequestURI: "T/x"}),
		Sign(Key("a"), Proof{Node: "n", Method: "GET", Host: "h", RequestURI: "/x"}))
	require.NotEqual(t, Sign(Key("a"), Proof{Node: "n1G", Method: "ET", Host: "h"}),
		Sign(Key("a"), Proof{Node: "n1", Method: "GET", Host: "h"}))
}

// TestProofBoundToNodeAndUsedOnce (issue 26 #6): a proof made for one node
// is refused by another, by its id and by its address, also when the other
// node takes its address or the Host or node header is rewritten; a proof is
// accepted once, its replay is refused; a date more than MaxFuture ahead is
// stale.
func TestProofBoundToNodeAndUsedOnce(t *testing.T) {
	verifier := func(id, addr string) *Verifier {
		return NewVerifier(VerifierConfig{Secret: "s3cret", Node: id, Addresses: []string{addr}, Now: fixed(t0)})
	}
	n1, n2 := verifier("n1", "n1:9000"), verifier("n2", "n2:9000")
	mkFor := func(node, host string, at time.Time) *http.Request {
		r := httptest.NewRequest("POST", "/internal/v1/shards/db/0/write?term=3", strings.NewReader("p"))
		r.Host = host
		SignRequest(Key("s3cret"), r, V3, node, []byte("p"), at)
		return r
	}
	mk := func(at time.Time) *http.Request { return mkFor("n1", "n1:9000", at) }
	r := mk(t0)
	replay := r.Clone(r.Context())
	replay.Body = io.NopCloser(strings.NewReader("p"))
	require.NoError(t, n1.VerifyRequest(r))
	err := n1.VerifyRequest(replay)
	require.ErrorIs(t, err, ErrReplayed)
	require.Equal(t, "replayed", Cause(err))

	err = n2.VerifyRequest(mk(t0))
	require.ErrorIs(t, err, ErrWrongNode)
	require.Equal(t, "wrong_node", Cause(err))
	moved := mk(t0)
	moved.Host = "n2:9000"
	require.ErrorIs(t, n2.VerifyRequest(moved), ErrWrongNode, "the node id names n1")
	renamed := mk(t0)
	renamed.Header.Set(HeaderNode, "n2")
	require.ErrorIs(t, verifier("n2", "n1:9000").VerifyRequest(renamed), ErrBadSignature, "the node id is signed")
	rehosted := mkFor("n2", "n1:9000", t0)
	rehosted.Host = "n2:9000"
	require.ErrorIs(t, n2.VerifyRequest(rehosted), ErrBadSignature, "the Host is signed")

	// n2 takes n1's address: a request made for n1 is still refused by n2,
	// and one made for n2 by n1 (the id, not only the address, is bound).
	n2there := verifier("n2", "n1:9000")
	require.ErrorIs(t, n2there.VerifyRequest(mk(t0)), ErrWrongNode)
	require.ErrorIs(t, n1.VerifyRequest(mkFor("n2", "n1:9000", t0)), ErrWrongNode)
	require.NoError(t, n2there.VerifyRequest(mkFor("n2", "n1:9000", t0)))

	require.NoError(t, n1.VerifyRequest(mk(t0.Add(MaxFuture))))
	require.ErrorIs(t, n1.VerifyRequest(mk(t0.Add(MaxFuture+time.Millisecond))), ErrStale, "more than 5 s ahead")
	require.NoError(t, n1.VerifyRequest(mk(t0.Add(-DefaultSkew))))
	require.ErrorIs(t, n1.VerifyRequest(mk(t0.Add(-DefaultSkew-time.Second))), ErrStale)
	// Two requests alike in every field but their nonce are both accepted.
	require.NoError(t, n1.VerifyRequest(mk(t0)))
	require.NoError(t, n1.VerifyRequest(mk(t0)))
}

// TestVersion2OnlyDuringARoll: a proof without a node id (version 2, what
// the previous release signs) is refused unless the node is told a node of
// that release is live; accepted then, with a warning once a minute; a
// version 3 signature stripped of its node header is malformed, never taken
// for version 2.
func TestVersion2OnlyDuringARoll(t *testing.T) {
	roll := false
	core, logs := observer.New(zap.WarnLevel)
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Addresses: []string{"n1:9000"}, Now: fixed(t0),
		AcceptV2: func() bool { return roll }, Logger: zap.New(core)})
	mk := func(node string) *http.Request {
		r := httptest.NewRequest("GET", "/internal/v1/txn?db=d&shard=0", nil)
		r.Host = "n1:9000"
		v := V3
		if node == "" {
			v = V2
		}
		SignRequest(Key("s3cret"), r, v, node, nil, t0)
		return r
	}
	err := v.VerifyRequest(mk(""))
	require.ErrorIs(t, err, ErrUnbound)
	require.Equal(t, "unbound", Cause(err))
	never := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Now: fixed(t0)})
	require.ErrorIs(t, never.VerifyRequest(mk("")), ErrUnbound, "no AcceptV2: never")

	roll = true
	require.NoError(t, v.VerifyRequest(mk("")))
	require.NoError(t, v.VerifyRequest(mk("")))
	require.Len(t, logs.FilterMessageSnippet("version 2").All(), 1, "warned, once a minute")
	forged := mk("")
	forged.Host = "n2:9000"
	require.ErrorIs(t, v.VerifyRequest(forged), ErrWrongNode, "version 2 is still bound to the address")

	stripped := mk("n1")
	stripped.Header.Del(HeaderNode)
	require.ErrorIs(t, v.VerifyRequest(stripped), ErrMalformed)
	relabelled := mk("n1")
	relabelled.Header.Del(HeaderNode)
	relabelled.Header.Set(HeaderSignature, "v2="+relabelled.Header.Get(HeaderSignature)[3:])
	require.ErrorIs(t, v.VerifyRequest(relabelled), ErrBadSignature)
}

// TestReplayCacheBounded: a full cache forgets its oldest proofs and then
// refuses anything dated at or before them, so no replay ever gets through
// and memory stays bounded.
func TestReplayCacheBounded(t *testing.T) {
	c := newReplayCache(4)
	sig := func(i int) string {
		return Sign(Key("k"), Proof{Node: "n1", Method: "GET", Host: "h", RequestURI: "/x", Date: strconv.Itoa(i), Nonce: "00", Digest: Digest(nil)})
	}
	for i := range 4 {
		require.NoError(t, c.add(sig(i), int64(100+i), 0))
	}
	require.ErrorIs(t, c.add(sig(2), 102, 0), ErrReplayed)
	require.NoError(t, c.add(sig(4), 104, 0)) // forgets sig(0), dated 100
	require.Len(t, c.seen, 4)
	require.ErrorIs(t, c.add(sig(0), 100, 0), ErrStale, "forgotten, but not replayable")
	require.NoError(t, c.add(sig(5), 103, 0)) // forgets sig(1), dated 101
	require.ErrorIs(t, c.add(sig(1), 101, 0), ErrStale)
	require.ErrorIs(t, c.add(sig(2), 102, 0), ErrReplayed)
}

// The transport signs what the server verifies, keeps the body intact,
// upgrades the scheme when asked and logs a refusal once per minute.
func TestTransport(t *testing.T) {
	now := t0
	clock := func() time.Time { return now }
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Now: clock})
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := v.VerifyRequest(r); err != nil {
			w.Header().Set(HeaderError, Cause(err))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		gotBody, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	toN1 := ToNode(context.Background(), "n1")
	get := func(c *http.Client, url string) *http.Response {
		req, err := http.NewRequestWithContext(toN1, "GET", url, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	core, logs := observer.New(zap.InfoLevel)
	good := &http.Client{Transport: NewTransport(TransportConfig{Secret: "s3cret", Now: clock, Logger: zap.New(core)})}
	req, err := http.NewRequestWithContext(toN1, "POST", srv.URL+"/internal/v1/shards/db/0/write?term=2", bytes.NewReader([]byte("points")))
	require.NoError(t, err)
	resp, err := good.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "points", string(gotBody))

	// A body without GetBody is read once and still sent whole.
	req, err = http.NewRequestWithContext(toN1, "POST", srv.URL+"/internal/v1/shards/db/0/write?term=2", io.NopCloser(strings.NewReader("stream")))
	require.NoError(t, err)
	resp, err = good.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "stream", string(gotBody))

	bad := &http.Client{Transport: NewTransport(TransportConfig{Secret: "wrong", Now: clock, Logger: zap.New(core)})}
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, get(bad, srv.URL+"/internal/v1/shards/db/0/log?term=2").StatusCode)
	}
	refusals := logs.FilterMessageSnippet("cannot authenticate to peer").All()
	require.Len(t, refusals, 1, "rate limited to one line per minute")
	require.Equal(t, "bad_signature", refusals[0].ContextMap()["cause"])
	require.Contains(t, refusals[0].ContextMap()["hint"], "secrets differ")
	require.NotContains(t, logs.All()[0].Message+refusals[0].ContextMap()["hint"].(string), "wrong")

	now = now.Add(61 * time.Second)
	get(bad, srv.URL+"/internal/v1/shards/db/0/log?term=2")
	require.Len(t, logs.FilterMessageSnippet("cannot authenticate to peer").All(), 2)

	none := &http.Client{Transport: NewTransport(TransportConfig{Now: clock})}
	resp = get(none, srv.URL+"/x")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "missing", resp.Header.Get(HeaderError))

	// Signing, a request that names no target node is not sent.
	sent := false
	untargeted := NewTransport(TransportConfig{Secret: "s3cret", Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = true
		return nil, errors.New("stop")
	})})
	req, err = http.NewRequest("POST", srv.URL+"/internal/v1/x", strings.NewReader("b"))
	require.NoError(t, err)
	_, err = untargeted.RoundTrip(req)
	require.ErrorIs(t, err, ErrNoTarget)
	require.False(t, sent)

	// The version follows the target's advertised protocol: a node of the
	// previous release gets version 2 (no node header), which this verifier
	// refuses as unbound: it sees no roll.
	old := &http.Client{Transport: NewTransport(TransportConfig{Secret: "s3cret", Now: clock,
		ProofVersion: func(node string) int { return map[string]int{"n1": V2}[node] }})}
	resp = get(old, srv.URL+"/internal/v1/shards/db/0/log?term=2")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "unbound", resp.Header.Get(HeaderError))

	// HTTPS: the transport asks for https on an http:// URL.
	var seen string
	up := NewTransport(TransportConfig{HTTPS: true, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = r.URL.String()
		return nil, errors.New("stop")
	})})
	orig, _ := http.NewRequest("GET", "http://127.0.0.1:1/internal/v1/x", nil)
	_, _ = up.RoundTrip(orig)
	require.Equal(t, "https://127.0.0.1:1/internal/v1/x", seen)
	require.Equal(t, "http", orig.URL.Scheme, "the caller's request is not modified")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestLimiterBounded(t *testing.T) {
	l := NewLimiter(time.Minute, fixed(t0))
	require.True(t, l.Allow("a"))
	require.False(t, l.Allow("a"))
	for i := range 2000 {
		l.Allow(strconv.Itoa(i))
	}
	require.LessOrEqual(t, len(l.last), 1024)
}

// FuzzVerify: no header or body combination panics, and nothing but a proof
// made with the secret for this node passes.
func FuzzVerify(f *testing.F) {
	key := Key("s3cret")
	date := strconv.FormatInt(t0.UnixMilli(), 10)
	nonce := strings.Repeat("ab", nonceLen)
	good := Proof{Node: "n1", Method: "POST", Host: "n1:9000", RequestURI: "/internal/v1/shards/db/0/write?term=1", Date: date, Nonce: nonce, Digest: Digest([]byte("b"))}
	f.Add("n1", good.Method, good.Host, good.RequestURI, date, nonce, good.Digest, Sign(key, good), []byte("b"))
	old := good
	old.Version, old.Node = V2, ""
	f.Add("", old.Method, old.Host, old.RequestURI, date, nonce, old.Digest, Sign(key, old), []byte("b"))
	v1 := Proof{Version: V1, Method: good.Method, RequestURI: good.RequestURI, Date: date, Digest: good.Digest}
	f.Add("", v1.Method, "n1:9000", v1.RequestURI, date, "", v1.Digest, Sign(key, v1), []byte("b"))
	f.Add("n2", "GET", "", "/", "", "", "", "", []byte(nil))
	f.Add("n1", "GET", "n1:9000", "/x", "-1", nonce, strings.Repeat("0", 64), "v3="+strings.Repeat("f", 64), []byte{})
	f.Add("", "GET", "N1:9000", "/x", "99999999999999999999", "00", "zz", "v1=", []byte("x"))
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Addresses: []string{"n1:9000"}, Now: fixed(t0)})
	f.Fuzz(func(t *testing.T, node, method, host, uri, date, nonce, digest, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderNode, node)
		h.Set(HeaderDate, date)
		h.Set(HeaderNonce, nonce)
		h.Set(HeaderDigest, digest)
		h.Set(HeaderSignature, sig)
		d, err := v.CheckHeaders(method, host, uri, h)
		if err != nil {
			require.NotEmpty(t, Cause(err))
			return
		}
		// Accepted headers must be exactly what the secret signs, for this
		// node's id and address; versions 1 and 2 are never accepted here.
		require.True(t, strings.EqualFold(host, "n1:9000"))
		require.Equal(t, "n1", h.Get(HeaderNode))
		require.Equal(t, Sign(key, Proof{Node: h.Get(HeaderNode), Method: method, Host: host, RequestURI: uri, Date: h.Get(HeaderDate),
			Nonce: h.Get(HeaderNonce), Digest: h.Get(HeaderDigest)}), h.Get(HeaderSignature))
		if CheckBody(d, body) == nil {
			require.Equal(t, Digest(body), d)
		}
	})
}
