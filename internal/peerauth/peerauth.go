// Package peerauth proves, on every request one Cairn node sends another
// (broker to shard leader, follower to leader, leave, handoff), that the
// sender knows the cluster secret, and checks that proof on the receiving
// side before the internal API does any work.
//
// # Scheme (version 2)
//
// The key is derived once from the secret: key = HMAC-SHA256(secret,
// "cairn peer auth v1"), so the secret itself never keys a MAC on the wire.
// The sender adds four headers to the request:
//
//	X-Cairn-Date:           signing time, unix milliseconds (decimal)
//	X-Cairn-Nonce:          16 random bytes, hex: no two requests sign alike
//	X-Cairn-Content-SHA256: hex SHA-256 of the request body (of no bytes when there is none)
//	X-Cairn-Signature:      "v2=" + hex HMAC-SHA256(key, canonical)
//
// where canonical is the seven lines
//
//	cairn-peer-v2
//	<METHOD>
//	<Host: the target node's address as dialed (its advertised address)>
//	<request URI as sent on the wire: escaped path, "?", raw query>
//	<X-Cairn-Date>
//	<X-Cairn-Nonce>
//	<X-Cairn-Content-SHA256>
//
// joined with "\n". The receiver checks, in this order and before reading the
// body: all four headers present and well formed; the Host is this node's
// own address (a request signed for one node is refused by every other);
// the date at most DefaultSkew (5 minutes) old and at most MaxFuture (5
// seconds) ahead of the receiver's clock; the signature, in constant time;
// that the signature was not seen before (a bounded cache of recent ones:
// when it is full, requests older than the oldest it remembers are refused
// as stale, so a replay is never accepted). Only then does it read the body
// (bounded by the server's body limit) and compare its digest. A refusal is
// 401 with the cause in X-Cairn-Auth-Error (missing, malformed, stale,
// wrong_node, bad_signature, replayed, body_mismatch, client_cert), which the
// sending node logs so an operator sees why a node cannot join replication.
//
// Responses are not signed: request bodies are small (a write batch at most),
// while responses may be long streams (snapshots, log pulls). Use TLS with
// --tls-ca when the network between nodes is not trusted: the MAC does not
// hide data.
package peerauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Header names of the proof.
const (
	HeaderDate      = "X-Cairn-Date"
	HeaderNonce     = "X-Cairn-Nonce"
	HeaderDigest    = "X-Cairn-Content-Sha256"
	HeaderSignature = "X-Cairn-Signature"
	// HeaderError carries the cause of a 401 from the internal API.
	HeaderError = "X-Cairn-Auth-Error"
)

// DefaultSkew is how old a request's date may be by the receiver's clock.
const DefaultSkew = 5 * time.Minute

// MaxFuture is how far ahead of the receiver's clock a request's date may
// be: the nodes' clock difference, not a window to replay in.
const MaxFuture = 5 * time.Second

const (
	sigPrefix = "v2="
	nonceLen  = 16
)

// Causes of a refused proof; each maps to the X-Cairn-Auth-Error value of
// its 401.
var (
	ErrMissing      = errors.New("missing cluster secret proof")
	ErrMalformed    = errors.New("malformed cluster secret proof")
	ErrStale        = errors.New("cluster secret proof outside the clock skew window")
	ErrWrongNode    = errors.New("cluster secret proof was made for another node")
	ErrReplayed     = errors.New("cluster secret proof was already used")
	ErrBadSignature = errors.New("cluster secret proof does not match this node's secret")
	ErrBodyMismatch = errors.New("request body does not match its signed digest")
	ErrNoClientCert = errors.New("internal API requires a client certificate verified by --tls-client-ca")
)

// Cause is the X-Cairn-Auth-Error value for err ("" when err is none of the
// sentinels).
func Cause(err error) string {
	switch {
	case errors.Is(err, ErrMissing):
		return "missing"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrStale):
		return "stale"
	case errors.Is(err, ErrWrongNode):
		return "wrong_node"
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, ErrReplayed):
		return "replayed"
	case errors.Is(err, ErrBodyMismatch):
		return "body_mismatch"
	case errors.Is(err, ErrNoClientCert):
		return "client_cert"
	}
	return ""
}

// Key derives the MAC key from a cluster secret; nil for an empty secret.
func Key(secret string) []byte {
	if secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("cairn peer auth v1"))
	return m.Sum(nil)
}

// Digest is the hex SHA-256 of body, as carried in X-Cairn-Content-Sha256.
func Digest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Sign computes the X-Cairn-Signature value.
func Sign(key []byte, method, host, requestURI, date, nonce, digest string) string {
	m := hmac.New(sha256.New, key)
	for i, part := range []string{"cairn-peer-v2", method, strings.ToLower(host), requestURI, date, nonce, digest} {
		if i > 0 {
			m.Write([]byte{'\n'})
		}
		m.Write([]byte(part))
	}
	return sigPrefix + hex.EncodeToString(m.Sum(nil))
}

// SignRequest adds the proof headers to req for body (which must be the
// bytes req will send) at time now, for the host req is sent to.
func SignRequest(key []byte, req *http.Request, body []byte, now time.Time) {
	date := strconv.FormatInt(now.UnixMilli(), 10)
	var raw [nonceLen]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	nonce := hex.EncodeToString(raw[:])
	digest := Digest(body)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	req.Header.Set(HeaderDate, date)
	req.Header.Set(HeaderNonce, nonce)
	req.Header.Set(HeaderDigest, digest)
	req.Header.Set(HeaderSignature, Sign(key, req.Method, host, req.URL.RequestURI(), date, nonce, digest))
}

// Verifier checks proofs against one secret.
type Verifier struct {
	key    []byte
	skew   time.Duration
	now    func() time.Time
	self   []string // this node's addresses; empty: any Host
	replay *replayCache
}

// NewVerifier checks proofs made with secret; skew 0 means DefaultSkew, now
// nil means time.Now. self lists the addresses this node is reached at (its
// advertised address): a proof made for another Host is refused. None: the
// Host is signed but any is accepted (tests).
func NewVerifier(secret string, skew time.Duration, now func() time.Time, self ...string) *Verifier {
	if skew <= 0 {
		skew = DefaultSkew
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: Key(secret), skew: skew, now: now, self: self, replay: newReplayCache(ReplayCacheSize)}
}

// CheckHeaders verifies the proof headers of a request (method, Host and
// request URI as received) without looking at the body; it returns the
// signed body digest for CheckBody. A good proof is remembered: the same
// one is refused next time.
func (v *Verifier) CheckHeaders(method, host, requestURI string, h http.Header) (string, error) {
	date, nonce, digest, sig := h.Get(HeaderDate), h.Get(HeaderNonce), h.Get(HeaderDigest), h.Get(HeaderSignature)
	if date == "" && digest == "" && sig == "" && nonce == "" {
		return "", ErrMissing
	}
	ms, err := strconv.ParseInt(date, 10, 64)
	if err != nil || ms < 0 || len(date) > 19 {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDate)
	}
	if len(nonce) != nonceLen*2 || !isLowerHex(nonce) {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderNonce)
	}
	if len(digest) != sha256.Size*2 || !isLowerHex(digest) {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDigest)
	}
	if len(sig) != len(sigPrefix)+sha256.Size*2 || !strings.HasPrefix(sig, sigPrefix) || !isLowerHex(sig[len(sigPrefix):]) {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderSignature)
	}
	off := v.now().Sub(time.UnixMilli(ms))
	if off > v.skew || off < -MaxFuture {
		return "", fmt.Errorf("%w: request dated %s away from this node's clock (allowed %s back, %s ahead)", ErrStale, off.Round(time.Second), v.skew, MaxFuture)
	}
	if len(v.self) > 0 && !slices.ContainsFunc(v.self, func(a string) bool { return strings.EqualFold(a, host) }) {
		return "", fmt.Errorf("%w: signed for %q, this node is %q", ErrWrongNode, host, v.self[0])
	}
	want := Sign(v.key, method, host, requestURI, date, nonce, digest)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return "", ErrBadSignature
	}
	if err := v.replay.add(sig, ms, v.now().Add(-v.skew).UnixMilli()); err != nil {
		return "", err
	}
	return digest, nil
}

// CheckBody compares body with the signed digest, in constant time.
func CheckBody(digest string, body []byte) error {
	if !hmac.Equal([]byte(Digest(body)), []byte(digest)) {
		return ErrBodyMismatch
	}
	return nil
}

// VerifyRequest checks r's proof; when the headers are good it reads the
// body (the server's body limit applies), checks its digest and puts the
// bytes back for the handler. Nothing is read from a request whose headers
// fail.
func (v *Verifier) VerifyRequest(r *http.Request) error {
	digest, err := v.CheckHeaders(r.Method, r.Host, r.RequestURI, r.Header)
	if err != nil {
		return err
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		body, err = readBody(r.Body, r.ContentLength)
		_ = r.Body.Close()
		if err != nil {
			return fmt.Errorf("%w: reading body: %w", ErrBodyMismatch, err)
		}
	}
	if err := CheckBody(digest, body); err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// readBody reads a whole body in one allocation when its length is known
// (the server has already checked Content-Length against the bytes sent and
// bounds the body).
func readBody(rd io.Reader, n int64) ([]byte, error) {
	if n <= 0 || n > 256<<20 {
		return io.ReadAll(rd)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, err
	}
	var one [1]byte
	if m, _ := rd.Read(one[:]); m != 0 {
		return nil, errors.New("body longer than its Content-Length")
	}
	return buf, nil
}

// RequireVerifiedCert refuses a request that did not present a client
// certificate verified against the server's client CA pool.
func RequireVerifiedCert(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return ErrNoClientCert
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
