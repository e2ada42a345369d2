// Package peerauth proves, on every request one Cairn node sends another
// (broker to shard leader, follower to leader, leave, handoff, the master's
// questions), that the sender knows the cluster secret and meant the request
// for the node that receives it, and checks that proof on the receiving side
// before the internal API does any work.
//
// # Scheme (version 3)
//
// The key is derived once from the secret: key = HMAC-SHA256(secret,
// "cairn peer auth v1"), so the secret itself never keys a MAC on the wire.
// The caller names the target node (ToNode: the id from the node's record or
// the master's election value; every caller addresses a node it knows by
// id, never a bare address). The sender adds five headers to the request:
//
//	X-Cairn-Node:           the target's node id
//	X-Cairn-Date:           signing time, unix milliseconds (decimal)
//	X-Cairn-Nonce:          16 random bytes, hex: no two requests sign alike
//	X-Cairn-Content-SHA256: hex SHA-256 of the request body (of no bytes when there is none)
//	X-Cairn-Signature:      "v3=" + hex HMAC-SHA256(key, canonical)
//
// where canonical is the eight lines
//
//	cairn-peer-v3
//	<X-Cairn-Node>
//	<METHOD>
//	<Host: the target node's address as dialed (its advertised address)>
//	<request URI as sent on the wire: escaped path, "?", raw query>
//	<X-Cairn-Date>
//	<X-Cairn-Nonce>
//	<X-Cairn-Content-SHA256>
//
// joined with "\n". The receiver checks, in this order and before reading the
// body: all headers present and well formed; the node id is this node's own
// and the Host one of its addresses (a request signed for one node is
// refused by every other, also by a node that later takes its address); the
// date at most DefaultSkew (5 minutes) old and at most MaxFuture (5 seconds)
// ahead of the receiver's clock; the signature, in constant time; that the
// signature was not seen before (a bounded cache of recent ones: when it is
// full, requests older than the oldest it remembers are refused as stale, so
// a replay is never accepted). Only then does it read the body (bounded by
// the server's body limit) and compare its digest. A refusal is 401 with the
// cause in X-Cairn-Auth-Error (missing, malformed, stale, wrong_node,
// bad_signature, replayed, unbound, body_mismatch, client_cert), which the
// sending node logs so an operator sees why a node cannot join replication.
//
// # Versions 1 and 2, during a roll
//
// Protocol 2 nodes sign and accept version 2: the same without the node
// line and header ("cairn-peer-v2", signature "v2="), bound to the target's
// address only. Release 0.1.0 (records without a protocol) signs and accepts
// version 1 only: three headers (X-Cairn-Date, X-Cairn-Content-Sha256 and
// X-Cairn-Signature "v1="), no nonce, over the five lines
//
//	cairn-peer-v1
//	<METHOD>
//	<request URI as sent on the wire>
//	<X-Cairn-Date>
//	<X-Cairn-Content-SHA256>
//
// bound to neither the target's id nor its address. A sender picks the
// version from the target's advertised protocol (TransportConfig.ProofVersion)
// and signs version 1 byte for byte as 0.1.0 does. A receiver refuses
// version 1 or 2 (cause unbound) unless VerifierConfig.AcceptV1 or AcceptV2
// says a roll is under way (a live node of that release), and then logs a
// warning once a minute for as long as it accepts them. An accepted version 1
// proof goes through the replay cache like the others: 0.1.0 signs no nonce,
// so two requests alike in method, URI, body and millisecond are one proof,
// and the second is refused as replayed (the sender's retry signs a new date).
//
// Responses are not signed: request bodies are small (a write batch at most),
// while responses may be long streams (snapshots, log pulls). Use TLS with
// --tls-ca when the network between nodes is not trusted: the MAC does not
// hide data.
package peerauth

import (
	"bytes"
	"context"
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

	"go.uber.org/zap"
)

// Header names of the proof.
const (
	HeaderNode      = "X-Cairn-Node"
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

// Proof versions (see the package comment).
const (
	// V1 binds nothing but the secret: release 0.1.0 (records without a
	// protocol).
	V1 = 1
	// V2 binds the target's address only: protocol 2.
	V2 = 2
	// V3 binds the target's node id and address: protocol 3 and later.
	V3 = 3
)

const (
	sigPrefixV1 = "v1="
	sigPrefixV2 = "v2="
	sigPrefixV3 = "v3="
	sigPrefix   = sigPrefixV3 // every prefix has this length
	nonceLen    = 16
	maxNodeLen  = 256
)

// Causes of a refused proof; each maps to the X-Cairn-Auth-Error value of
// its 401.
var (
	ErrMissing      = errors.New("missing cluster secret proof")
	ErrMalformed    = errors.New("malformed cluster secret proof")
	ErrStale        = errors.New("cluster secret proof outside the clock skew window")
	ErrWrongNode    = errors.New("cluster secret proof was made for another node")
	ErrReplayed     = errors.New("cluster secret proof was already used")
	ErrUnbound      = errors.New("cluster secret proof is not bound to a node id (version 1 or 2), and no node of the release that signs it is live")
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
	case errors.Is(err, ErrUnbound):
		return "unbound"
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

// Proof is what a signature covers. Version (V1, V2 or V3; 0 is V3) says
// which fields: V3 all of them, V2 all but Node, V1 Method, RequestURI, Date and
// Digest only.
type Proof struct {
	Version                                             int
	Node, Method, Host, RequestURI, Date, Nonce, Digest string
}

// Sign computes the X-Cairn-Signature value of p.
func Sign(key []byte, p Proof) string {
	m := hmac.New(sha256.New, key)
	var parts []string
	var prefix string
	switch p.Version {
	case V1:
		parts, prefix = []string{"cairn-peer-v1", p.Method, p.RequestURI, p.Date, p.Digest}, sigPrefixV1
	case V2:
		parts, prefix = []string{"cairn-peer-v2", p.Method, strings.ToLower(p.Host), p.RequestURI, p.Date, p.Nonce, p.Digest}, sigPrefixV2
	default:
		parts, prefix = []string{"cairn-peer-v3", p.Node, p.Method, strings.ToLower(p.Host), p.RequestURI, p.Date, p.Nonce, p.Digest}, sigPrefixV3
	}
	for i, part := range parts {
		if i > 0 {
			m.Write([]byte{'\n'})
		}
		m.Write([]byte(part))
	}
	return prefix + hex.EncodeToString(m.Sum(nil))
}

// SignRequest adds the proof headers of version v to req for body (which
// must be the bytes req will send) at time now, for the node id node (signed
// by version 3 only) at the host req is sent to. Versions 1 and 2 are only
// for a node of release 0.1.0 or of protocol 2, which accept nothing newer.
func SignRequest(key []byte, req *http.Request, v int, node string, body []byte, now time.Time) {
	p := Proof{Version: v, Method: req.Method, Host: req.Host, RequestURI: req.URL.RequestURI(),
		Date: strconv.FormatInt(now.UnixMilli(), 10), Digest: Digest(body)}
	if p.Host == "" {
		p.Host = req.URL.Host
	}
	req.Header.Del(HeaderNode)
	req.Header.Del(HeaderNonce)
	if v != V1 { // 0.1.0 sends no nonce
		var raw [nonceLen]byte
		_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
		p.Nonce = hex.EncodeToString(raw[:])
		req.Header.Set(HeaderNonce, p.Nonce)
	}
	if v != V1 && v != V2 {
		p.Version, p.Node = V3, node
		req.Header.Set(HeaderNode, node)
	}
	req.Header.Set(HeaderDate, p.Date)
	req.Header.Set(HeaderDigest, p.Digest)
	req.Header.Set(HeaderSignature, Sign(key, p))
}

type targetKey struct{}

// ToNode returns ctx naming the node id a request made with it is meant
// for: the Transport signs it into the proof, and refuses to send a request
// without one when it signs.
func ToNode(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, targetKey{}, node)
}

func targetOf(ctx context.Context) string {
	s, _ := ctx.Value(targetKey{}).(string)
	return s
}

// VerifierConfig configures the check of proofs.
type VerifierConfig struct {
	Secret string
	// Node is this node's id: a version 3 proof made for another id is
	// refused. Empty: the id is signed but any is accepted (tests).
	Node string
	// Addresses this node is reached at (its advertised address): a proof
	// made for another Host is refused. None: any Host (tests).
	Addresses []string
	// Skew is how old a proof may be; DefaultSkew when 0.
	Skew time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// AcceptV1 says whether a version 1 proof (bound to no node) is
	// accepted now: true only while a node of release 0.1.0 is live. nil:
	// never.
	AcceptV1 func() bool
	// AcceptV2 says whether a version 2 proof (bound to the address only)
	// is accepted now: true only while a node of protocol 2 is live. nil:
	// never.
	AcceptV2 func() bool
	// Logger warns, once a minute, while version 1 or 2 proofs are accepted.
	Logger *zap.Logger
}

// Verifier checks proofs against one secret.
type Verifier struct {
	key    []byte
	skew   time.Duration
	now    func() time.Time
	node   string
	self   []string // this node's addresses; empty: any Host
	v1, v2 func() bool
	lg     *zap.Logger
	warn   *Limiter
	replay *replayCache
}

// NewVerifier checks proofs as cfg says.
func NewVerifier(cfg VerifierConfig) *Verifier {
	if cfg.Skew <= 0 {
		cfg.Skew = DefaultSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Verifier{key: Key(cfg.Secret), skew: cfg.Skew, now: cfg.Now, node: cfg.Node, self: cfg.Addresses,
		v1: cfg.AcceptV1, v2: cfg.AcceptV2, lg: cfg.Logger, warn: NewLimiter(time.Minute, cfg.Now), replay: newReplayCache(ReplayCacheSize)}
}

// CheckHeaders verifies the proof headers of a request (method, Host and
// request URI as received) without looking at the body; it returns the
// signed body digest for CheckBody. A good proof is remembered: the same
// one is refused next time.
func (v *Verifier) CheckHeaders(method, host, requestURI string, h http.Header) (string, error) {
	p := Proof{Node: h.Get(HeaderNode), Method: method, Host: host, RequestURI: requestURI,
		Date: h.Get(HeaderDate), Nonce: h.Get(HeaderNonce), Digest: h.Get(HeaderDigest)}
	sig := h.Get(HeaderSignature)
	if p.Date == "" && p.Digest == "" && sig == "" && p.Nonce == "" {
		return "", ErrMissing
	}
	ms, err := checkForm(&p, sig)
	if err != nil {
		return "", err
	}
	off := v.now().Sub(time.UnixMilli(ms))
	if off > v.skew || off < -MaxFuture {
		return "", fmt.Errorf("%w: request dated %s away from this node's clock (allowed %s back, %s ahead)", ErrStale, off.Round(time.Second), v.skew, MaxFuture)
	}
	if p.Node != "" && v.node != "" && p.Node != v.node {
		return "", fmt.Errorf("%w: signed for node %q, this node is %q", ErrWrongNode, p.Node, v.node)
	}
	if len(v.self) > 0 && !slices.ContainsFunc(v.self, func(a string) bool { return strings.EqualFold(a, host) }) {
		return "", fmt.Errorf("%w: signed for %q, this node is %q", ErrWrongNode, host, v.self[0])
	}
	if !hmac.Equal([]byte(Sign(v.key, p)), []byte(sig)) {
		return "", ErrBadSignature
	}
	if err := v.checkOlder(p.Version); err != nil {
		return "", err
	}
	if err := v.replay.add(sig, ms, v.now().Add(-v.skew).UnixMilli()); err != nil {
		return "", err
	}
	return p.Digest, nil
}

// checkOlder refuses a version 1 or 2 proof unless a node of the release
// that signs it is live, and warns (once a minute per version) while it
// accepts them.
func (v *Verifier) checkOlder(version int) error {
	var accept func() bool
	var msg string
	switch version {
	case V1:
		accept, msg = v.v1, "accepting version 1 cluster secret proofs (bound to neither this node's id nor its address) while nodes of release 0.1.0 are live; they are refused once every live node advertises a protocol"
	case V2:
		accept, msg = v.v2, "accepting version 2 cluster secret proofs (bound to this node's address, not its id) while nodes of protocol 2 are live; they are refused once every node advertises protocol 3"
	default:
		return nil
	}
	if accept == nil || !accept() {
		return fmt.Errorf("%w: a version %d proof", ErrUnbound, version)
	}
	if v.warn.Allow(msg) {
		v.lg.Warn(msg)
	}
	return nil
}

// checkForm checks that every part of a proof is well formed, and that the
// signature's version matches the headers it comes with (a node id for
// version 3 only, a nonce for all but version 1); it sets p's version from
// the signature and returns the date.
func checkForm(p *Proof, sig string) (int64, error) {
	ms, err := strconv.ParseInt(p.Date, 10, 64)
	if err != nil || ms < 0 || len(p.Date) > 19 {
		return 0, fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDate)
	}
	if p.Nonce != "" && (len(p.Nonce) != nonceLen*2 || !isLowerHex(p.Nonce)) {
		return 0, fmt.Errorf("%w: bad %s", ErrMalformed, HeaderNonce)
	}
	if len(p.Digest) != sha256.Size*2 || !isLowerHex(p.Digest) {
		return 0, fmt.Errorf("%w: bad %s", ErrMalformed, HeaderDigest)
	}
	switch {
	case strings.HasPrefix(sig, sigPrefixV3) && p.Node != "" && p.Nonce != "":
		p.Version = V3
	case strings.HasPrefix(sig, sigPrefixV2) && p.Node == "" && p.Nonce != "":
		p.Version = V2
	case strings.HasPrefix(sig, sigPrefixV1) && p.Node == "" && p.Nonce == "":
		p.Version = V1
	default:
		return 0, fmt.Errorf("%w: bad %s, or headers of another version (%s for version 3 only, %s for all but version 1)",
			ErrMalformed, HeaderSignature, HeaderNode, HeaderNonce)
	}
	if len(sig) != len(sigPrefix)+sha256.Size*2 || !isLowerHex(sig[len(sigPrefix):]) {
		return 0, fmt.Errorf("%w: bad %s", ErrMalformed, HeaderSignature)
	}
	if len(p.Node) > maxNodeLen {
		return 0, fmt.Errorf("%w: bad %s", ErrMalformed, HeaderNode)
	}
	return ms, nil
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
