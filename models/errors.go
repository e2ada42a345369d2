package models

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// API error sentinels. Wrap them with %w; Codes maps them to HTTP statuses
// and envelope codes, the one table the whole binary uses.
var (
	ErrBadInput     = errors.New("bad input")               // 400
	ErrNotFound     = errors.New("not found")               // 404
	ErrConflict     = errors.New("conflict")                // 409
	ErrImpossible   = errors.New("impossible")              // 422
	ErrUnavailable  = errors.New("temporarily unavailable") // 503
	ErrUnauthorized = errors.New("unauthorized")            // 401
	ErrForbidden    = errors.New("forbidden")               // 403: a token of a narrower scope
	ErrTooLarge     = errors.New("too large")               // 413: over a size limit
	ErrMediaType    = errors.New("unsupported media type")  // 415: a body of the wrong Content-Type
	// ErrNoSpace: etcd is out of space and refuses metadata changes until an
	// operator frees space and disarms the alarm.
	ErrNoSpace = errors.New("etcd out of space")
	// ErrInsufficientStorage: the storage node that must take a write has
	// fenced itself off writes (its disk is full or failing) and no other
	// replica can take it.
	ErrInsufficientStorage = errors.New("insufficient storage") // 507
	// ErrOutcomeUnknown: a change may or may not have been applied.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// Sentinels of the storage nodes' internal replication API.
var (
	// ErrStaleTerm: the request's term is not the replica's leadership term.
	ErrStaleTerm = errors.New("stale term")
	// ErrNotHosted: the node holds no replica of the shard.
	ErrNotHosted = errors.New("shard not hosted here")
	// ErrNotEnoughISR: fewer in-sync replicas than the configured minimum.
	ErrNotEnoughISR = errors.New("not enough in-sync replicas")
	// ErrAckTimeout: the in-sync replicas did not confirm in time.
	ErrAckTimeout = errors.New("in-sync replicas did not confirm in time")
	// ErrBadQuery: an InfluxQL shard request the node cannot evaluate as
	// written (answered 400, like a too-large one, on the internal API).
	ErrBadQuery = errors.New("bad query")
	// ErrUnknownEndpoint: the node serves no such internal endpoint (a peer
	// of another version asked for it).
	ErrUnknownEndpoint = errors.New("unknown endpoint")
)

// ErrorCode ties a sentinel to its HTTP status and to the code string the
// JSON error envelope carries, from which a client recovers the sentinel.
type ErrorCode struct {
	Err    error
	Status int
	Code   string
}

// Codes is the status and code of every sentinel, most specific first: an
// error is answered with the first entry it wraps.
var Codes = []ErrorCode{
	{ErrBadInput, http.StatusBadRequest, "bad_request"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{ErrForbidden, http.StatusForbidden, "forbidden"},
	{ErrNotFound, http.StatusNotFound, "not_found"},
	{ErrConflict, http.StatusConflict, "conflict"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{ErrMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{ErrImpossible, http.StatusUnprocessableEntity, "unprocessable"},
	// Both before the generic 503: the client must learn that etcd is full
	// (an operator has to act) or that its change may have been applied.
	{ErrNoSpace, http.StatusServiceUnavailable, "etcd_nospace"},
	{ErrOutcomeUnknown, http.StatusServiceUnavailable, "outcome_unknown"},
	{ErrInsufficientStorage, http.StatusInsufficientStorage, "insufficient_storage"},
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	// The internal replication API's, after the API's own: an error that
	// wraps both answers with the API's. A write refused for too few in-sync
	// replicas is final for its batch; a confirmation timeout is worth
	// retrying.
	{ErrStaleTerm, http.StatusConflict, "stale_term"},
	{ErrNotHosted, http.StatusNotFound, "not_hosted"},
	{ErrNotEnoughISR, http.StatusServiceUnavailable, "not_enough_isr"},
	{ErrAckTimeout, http.StatusServiceUnavailable, "ack_timeout"},
	{ErrBadQuery, http.StatusBadRequest, "bad_query"},
	{ErrUnknownEndpoint, http.StatusNotFound, "unknown_endpoint"},
}

// internalCode is the code of an error no sentinel names.
const internalCode = "internal"

// StatusOf is the HTTP status and envelope code err answers with.
func StatusOf(err error) (int, string) {
	if err == nil {
		return http.StatusOK, ""
	}
	for _, c := range Codes {
		if errors.Is(err, c.Err) {
			return c.Status, c.Code
		}
	}
	return http.StatusInternalServerError, internalCode
}

// ErrorBody is the JSON error envelope of every failed call.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the envelope's content. A partial write (a
// *PartialWriteError) also carries its reason and count, so the broker
// that sent a shard's points learns them as a value.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"partial_reason,omitempty"`
	Dropped int    `json:"partial_dropped,omitempty"`
}

// Envelope is the status and body err answers with.
func Envelope(err error) (int, ErrorBody) {
	status, code := StatusOf(err)
	d := ErrorDetail{Code: code, Message: err.Error()}
	var pw *PartialWriteError
	if errors.As(err, &pw) {
		d.Reason, d.Dropped = pw.Reason, pw.Dropped
	}
	return status, ErrorBody{Error: d}
}

// SentinelOf is the sentinel an envelope code names; a code this binary does
// not know (a peer of another version) is ErrUnavailable.
func SentinelOf(code string) error {
	for _, c := range Codes {
		if c.Code == code {
			return c.Err
		}
	}
	return ErrUnavailable
}

// maxPeerMessage bounds the part of a peer's non-JSON answer kept as message.
const maxPeerMessage = 1024

// DecodeError turns the body of a peer's failed answer back into an error
// wrapping the sentinel its code names, with the peer's message.
func DecodeError(body []byte) error {
	var env ErrorBody
	if json.Unmarshal(body, &env) != nil || (env.Error.Code == "" && env.Error.Message == "") {
		env.Error.Message = string(body[:min(len(body), maxPeerMessage)])
	}
	if env.Error.Dropped > 0 && env.Error.Code == "bad_request" {
		return &PartialWriteError{Reason: env.Error.Reason, Dropped: env.Error.Dropped}
	}
	return Mark(errors.New(env.Error.Message), SentinelOf(env.Error.Code))
}

// Mark adds sentinel to err's chain and keeps err's message: it labels an
// error from a lower layer (etcd, a peer) with the API's vocabulary.
func Mark(err, sentinel error) error {
	if err == nil || errors.Is(err, sentinel) {
		return err
	}
	return marked{err, sentinel}
}

type marked struct{ err, sentinel error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.err, m.sentinel} }

// PartialWriteError is a write batch of which some lines were dropped
// (malformed, over a line limit, a field type conflict) while every other
// line was stored: InfluxDB's "partial write: <reason> dropped=N", a 400.
// It is only returned once the stored lines are as durable as a 204's.
type PartialWriteError struct {
	Reason  string // the first dropped line's
	Dropped int    // lines dropped
}

func (e *PartialWriteError) Error() string {
	return "partial write: " + e.Reason + " dropped=" + strconv.Itoa(e.Dropped)
}

// Unwrap makes it an ErrBadInput.
func (e *PartialWriteError) Unwrap() error { return ErrBadInput }
