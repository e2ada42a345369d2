// Package peerauth proves, on every request one Cairn node sends another
// (broker to shard leader, follower to leader, leave, handoff), that the
// sender knows the cluster secret, and checks that proof on the receiving
// side before the internal API does any work.
//
// # Scheme (version 1)
//
// The key is derived once from the secret: key = HMAC-SHA256(secret,
// "cairn peer auth v1"), so the secret itself never keys a MAC on the wire.
// The sender adds three headers to the request:
//
//	X-Cairn-Date:           signing time, unix milliseconds (decimal)
//	X-Cairn-Content-SHA256: hex SHA-256 of the request body (of no bytes when there is none)
//	X-Cairn-Signature:      "v1=" + hex HMAC-SHA256(key, canonical)
//
// where canonical is the five lines
//
//	cairn-peer-v1
//	<METHOD>
//	<request URI as sent on the wire: escaped path, "?", raw query>
//	<X-Cairn-Date>
//	<X-Cairn-Content-SHA256>
//
// joined with "\n". The receiver checks, in this order and before reading the
// body: all three headers present and well formed; the date within the skew
// window (default ±5 minutes of the receiver's clock); the signature, in
// constant time. Only then does it read the body (bounded by the server's body
// limit) and compare its digest. A refusal is 401 with the cause in
// X-Cairn-Auth-Error (missing, malformed, stale, bad_signature, body_mismatch,
// client_cert), which the sending node logs so an operator sees why a node
// cannot join replication.
//
// Responses are not signed: request bodies are small (a write batch at most),
// while responses may be long streams (snapshots, log pulls). Use TLS with
// --tls-ca when the network between nodes is not trusted: the MAC does not
// hide data, and a request captured on the wire could be replayed within the
// skew window (every replicated write also carries a term, and a replayed
// write appends points that were already accepted once).
package peerauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the proof.
const (
	HeaderDate      = "X-Cairn-Date"
	HeaderDigest    = "X-Cairn-Content-Sha256"
	HeaderSignature = "X-Cairn-Signature"
	// HeaderError carries the cause of a 401 from the internal API.
	HeaderError = "X-Cairn-Auth-Error"
)

// DefaultSkew is how far a request's date may be from the receiver's clock.
const DefaultSkew = 5 * time.Minute

const sigPrefix = "v1="

// Causes of a refused proof; each maps to the X-Cairn-Auth-Error value of
// its 401.
var (
	ErrMissing      = errors.New("missing cluster secret proof")
	ErrMalformed    = errors.New("malformed cluster secret proof")
	ErrStale        = errors.New("cluster secret proof outside the clock skew window")
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
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
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
func Sign(key []byte, method, requestURI, date, digest string) string {
	m := hmac.New(sha256.New, key)
	for i, part := range []string{"cairn-peer-v1", method, requestURI, date, digest} {
		if i > 0 {
			m.Write([]byte{'\n'})
		}
		m.Write([]byte(part))
	}
	return sigPrefix + hex.EncodeToString(m.Sum(nil))
}

// SignRequest adds the proof headers to req for body (which must be the
// bytes req will send) at time now.
func SignRequest(key []byte, req *http.Request, body []byte, now time.Time) {
	date := strconv.FormatInt(now.UnixMilli(), 10)
	digest := Digest(body)
	req.Header.Set(HeaderDate, date)
	req.Header.Set(HeaderDigest, digest)
	req.Header.Set(HeaderSignature, Sign(key, req.Method, req.URL.RequestURI(), date, digest))
}

// Verifier checks proofs against one secret.
type Verifier struct {
	key  []byte
	skew time.Duration
	now  func() time.Time
}

// NewVerifier checks proofs made with secret; skew 0 means DefaultSkew, now
// nil means time.Now.
func NewVerifier(secret string, skew time.Duration, now func() time.Time) *Verifier {
	if skew <= 0 {
		skew = DefaultSkew
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: Key(secret), skew: skew, now: now}
}

// CheckHeaders verifies the proof headers of a request (method and request
// URI as received) without looking at the body; it returns the signed body
// digest for CheckBody.
func (v *Verifier) CheckHeaders(method, requestURI string, h http.Header) (string, error) {
	date, digest, sig := h.Get(HeaderDate), h.Get(HeaderDigest), h.Get(HeaderSignature)
	if date == "" && digest == "" && sig == "" {
		return "", ErrMissing
	}
	ms, err := strconv.ParseInt(date, 10, 64)
	if err != nil || ms < 0 || len(date) > 19 {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDate)
	}
	if len(digest) != sha256.Size*2 || !isLowerHex(digest) {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDigest)
	}
	if len(sig) != len(sigPrefix)+sha256.Size*2 || !strings.HasPrefix(sig, sigPrefix) || !isLowerHex(sig[len(sigPrefix):]) {
		return "", fmt.Errorf("%w: bad %s", ErrMalformed, HeaderSignature)
	}
	off := v.now().Sub(time.UnixMilli(ms))
	if off > v.skew || off < -v.skew {
		return "", fmt.Errorf("%w: request dated %s away from this node's clock (allowed %s)", ErrStale, off.Round(time.Second), v.skew)
	}
	want := Sign(v.key, method, requestURI, date, digest)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return "", ErrBadSignature
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
	digest, err := v.CheckHeaders(r.Method, r.RequestURI, r.Header)
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
