package peerauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestVersion1IsRelease010s: a version 1 proof, for a node of release
// 0.1.0, is the three headers 0.1.0 sends and checks (date, body digest,
// signature; no nonce, no node id) with the MAC over its five documented
// lines, computed here from the format, not from the signing code.
func TestVersion1IsRelease010s(t *testing.T) {
	body := []byte("cpu v=1 1\n")
	uri := "/internal/v1/shards/db/0/write?term=3&from=a%2Fb"
	r := httptest.NewRequest("POST", uri, nil)
	r.Host = "n1:9000"
	r.Header.Set(HeaderNonce, "left over")
	r.Header.Set(HeaderNode, "left over")
	SignRequest(Key("s3cret"), r, V1, "n1", body, t0)

	date := strconv.FormatInt(t0.UnixMilli(), 10)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	secretMAC := hmac.New(sha256.New, []byte("s3cret"))
	secretMAC.Write([]byte("cairn peer auth v1"))
	m := hmac.New(sha256.New, secretMAC.Sum(nil))
	m.Write([]byte("cairn-peer-v1\nPOST\n" + uri + "\n" + date + "\n" + digest))
	require.Equal(t, http.Header{
		HeaderDate:      {date},
		HeaderDigest:    {digest},
		HeaderSignature: {"v1=" + hex.EncodeToString(m.Sum(nil))},
	}, r.Header, "exactly 0.1.0's headers and signature")
}

// TestVersion1OnlyWhile010IsLive: a version 1 proof is refused as unbound
// unless the node is told a node of release 0.1.0 is live; accepted then,
// with a warning once a minute, and still only once; a version 1 proof with
// a node id or a nonce is not 0.1.0's and is malformed, and a version 3 MAC
// relabelled version 1 does not verify.
func TestVersion1OnlyWhile010IsLive(t *testing.T) {
	roll := false
	core, logs := observer.New(zap.WarnLevel)
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Addresses: []string{"n1:9000"}, Now: fixed(t0),
		AcceptV1: func() bool { return roll }, AcceptV2: func() bool { return true }, Logger: zap.New(core)})
	n := 0
	mk := func(version int) *http.Request {
		n++ // a distinct request each time
		r := httptest.NewRequest("GET", "/internal/v1/txn?db=d&shard="+strconv.Itoa(n), nil)
		r.Host = "n1:9000"
		SignRequest(Key("s3cret"), r, version, "n1", nil, t0)
		return r
	}
	err := v.VerifyRequest(mk(V1))
	require.ErrorIs(t, err, ErrUnbound)
	require.Equal(t, "unbound", Cause(err))
	never := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", Now: fixed(t0)})
	require.ErrorIs(t, never.VerifyRequest(mk(V1)), ErrUnbound, "no AcceptV1: never")
	require.NoError(t, v.VerifyRequest(mk(V2)), "the version 2 gate is its own")

	roll = true
	r := mk(V1)
	replay := r.Clone(r.Context())
	require.NoError(t, v.VerifyRequest(r))
	require.ErrorIs(t, v.VerifyRequest(replay), ErrReplayed)
	require.NoError(t, v.VerifyRequest(mk(V1)))
	require.Len(t, logs.FilterMessageSnippet("version 1").All(), 1, "warned, once a minute")
	require.NoError(t, v.VerifyRequest(mk(V1)))
	require.Len(t, logs.FilterMessageSnippet("version 1").All(), 1)
	other := httptest.NewRequest("GET", "/internal/v1/txn", nil)
	other.Host = "n1:9000"
	SignRequest(Key("other"), other, V1, "", nil, t0)
	require.ErrorIs(t, v.VerifyRequest(other), ErrBadSignature)

	withNode := mk(V1)
	withNode.Header.Set(HeaderNode, "n1")
	require.ErrorIs(t, v.VerifyRequest(withNode), ErrMalformed)
	withNonce := mk(V1)
	withNonce.Header.Set(HeaderNonce, strings.Repeat("ab", nonceLen))
	require.ErrorIs(t, v.VerifyRequest(withNonce), ErrMalformed)
	relabelled := mk(V3)
	relabelled.Header.Del(HeaderNode)
	relabelled.Header.Del(HeaderNonce)
	relabelled.Header.Set(HeaderSignature, "v1="+relabelled.Header.Get(HeaderSignature)[3:])
	require.ErrorIs(t, v.VerifyRequest(relabelled), ErrBadSignature)
	require.NoError(t, v.VerifyRequest(mk(V1)))

	stale := httptest.NewRequest("GET", "/internal/v1/txn", nil)
	stale.Host = "n1:9000"
	SignRequest(Key("s3cret"), stale, V1, "", nil, t0.Add(-DefaultSkew-time.Second))
	require.ErrorIs(t, v.VerifyRequest(stale), ErrStale)
}

// TestTransportSignsVersion1For010: the transport signs version 1 for a node
// the caller says is of release 0.1.0, and the verifier accepts it only while
// it is told such a node is live.
func TestTransportSignsVersion1For010(t *testing.T) {
	var roll atomic.Bool
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1", AcceptV1: roll.Load})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := v.VerifyRequest(r); err != nil {
			w.Header().Set(HeaderError, Cause(err))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		assert.Empty(t, r.Header.Get(HeaderNonce))
		assert.Empty(t, r.Header.Get(HeaderNode))
		assert.True(t, strings.HasPrefix(r.Header.Get(HeaderSignature), "v1="))
	}))
	defer srv.Close()
	c := &http.Client{Transport: NewTransport(TransportConfig{Secret: "s3cret",
		ProofVersion: func(node string) int { return map[string]int{"n1": V1}[node] }})}
	get := func() *http.Response {
		req, err := http.NewRequestWithContext(ToNode(t.Context(), "n1"), "POST", srv.URL+"/internal/v1/x", strings.NewReader(strconv.Itoa(int(time.Now().UnixNano()))))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := get()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "unbound", resp.Header.Get(HeaderError))
	roll.Store(true)
	require.Equal(t, http.StatusOK, get().StatusCode)
}
