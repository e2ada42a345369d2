// Package client is the typed client of a storage node's internal API (see
// storage/http.go for the server side), and the home of its wire format:
// requests and answers are values, refusals come back as errors wrapping the
// models sentinels their envelope codes name (checked with errors.Is), and
// the encodings both sides share (the batched fetch's records, the headers)
// are defined here once. Callers need not know storage/engine's entry codec.
//
// The client does not build its transport: the http.Client it is given
// carries the node-to-node authentication (peerauth) and TLS.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
)

var (
	// ErrBadAnswer: a storage node's answer did not decode or did not match
	// the question.
	ErrBadAnswer = errors.New("storage client: bad answer from storage node")
	// ErrUnsupported: the node has no such endpoint: a node of another
	// version. Any refusal of an unknown endpoint counts: 404 without an
	// error code or with unknown_endpoint, 405 and 501 (an older node's
	// console answered POSTs to unknown paths 405), and a web page where an
	// answer was expected (an older node's console answered GETs of unknown
	// paths 200 with its page).
	ErrUnsupported = errors.New("storage client: endpoint not served by this node")
)

// Peer is a node as the caller knows it from its record or the master's
// election value: its id, signed into every request so that no other node
// accepts it (peerauth), and its address (host:port of its HTTP listener).
// There is no call by address alone.
type Peer struct {
	ID      string
	Address string
}

func (p Peer) String() string { return p.ID + " at " + p.Address }

// Shard addresses one shard replica on one storage node.
type Shard struct {
	Peer
	DB    string
	Shard int
}

func (s Shard) String() string { return fmt.Sprintf("%s/%d on %s", s.DB, s.Shard, s.Peer) }

// path is the internal API's path (and query) of op on s.
func (s Shard) path(op string, q url.Values) string {
	u := fmt.Sprintf("/internal/v1/shards/%s/%d/%s", url.PathEscape(s.DB), s.Shard, op)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// Headers of the internal API's answers.
const (
	// HeaderTruncateTo: on a log answer 205, the txn id after which the
	// follower truncates its diverged log.
	HeaderTruncateTo = "X-Cairn-Truncate-To"
	// HeaderSeries and HeaderPoints count a query answer, sent before its
	// body so the caller can refuse an answer over its limits unread.
	HeaderSeries = "X-Cairn-Series"
	HeaderPoints = "X-Cairn-Points"
)

// PeerError is a storage node's refusal, as opposed to not reaching it: its
// status, and an error wrapping the sentinel its code names.
type PeerError struct {
	Status int
	Err    error
}

func (e *PeerError) Error() string { return e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// maxErrorBody bounds the part of a refusal read.
const maxErrorBody = 4096

// maxAnswer bounds what one answer decoded in memory may hold (a shard's
// InfluxQL partials, its series list, a last-txn answer).
const maxAnswer = 1 << 30

// maxEntryBytes bounds one log entry in a stream.
const maxEntryBytes = 256 << 20

// Client calls storage nodes. The zero value is not usable: HTTP is the
// node-to-node client (peer authentication, TLS).
type Client struct {
	HTTP *http.Client
}

// New returns a client over hc.
func New(hc *http.Client) *Client { return &Client{HTTP: hc} }

// do sends one request to path on node p and returns the answer when its
// status is one of ok (the caller closes its body); any other status is a
// *PeerError.
func (c *Client) do(ctx context.Context, p Peer, method, path, contentType string, body io.Reader, ok ...int) (*http.Response, error) {
	u := "http://" + p.Address + path
	req, err := http.NewRequestWithContext(peerauth.ToNode(ctx, p.ID), method, u, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
				resp.Body.Close()
				return nil, &PeerError{Status: resp.StatusCode, Err: fmt.Errorf("%w: %s answered with a web page", ErrUnsupported, u)}
			}
			return resp, nil
		}
	}
	defer resp.Body.Close()
	return nil, refusal(resp)
}

// refusal decodes a failed answer's envelope into a *PeerError.
func refusal(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	err := models.DecodeError(msg)
	var env models.ErrorBody
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		return &PeerError{Status: resp.StatusCode, Err: models.Mark(err, ErrUnsupported)}
	}
	switch resp.StatusCode {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		err = models.Mark(err, ErrUnsupported)
	case http.StatusNotFound:
		if json.Unmarshal(msg, &env) != nil || env.Error.Code == "" || errors.Is(err, models.ErrUnknownEndpoint) {
			err = models.Mark(err, ErrUnsupported)
		}
	}
	return &PeerError{Status: resp.StatusCode, Err: err}
}

// readAll reads a whole answer of at most limit bytes.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: the answer passed %d bytes", models.ErrTooLarge, limit)
	}
	return data, nil
}

// Leave asks the shard's leader at term to drop node from the in-sync set.
func (c *Client) Leave(ctx context.Context, s Shard, term int64, node string) error {
	q := url.Values{"term": {strconv.FormatInt(term, 10)}, "node": {node}}
	resp, err := c.do(ctx, s.Peer, http.MethodPost, s.path("leave", q), "", nil, http.StatusNoContent)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// TxnAnswer is the body of GET /internal/v1/txn.
type TxnAnswer struct {
	Shards map[string]models.ReplicaTxn `json:"shards"` // shard number -> answer (hosted shards only)
}

// maxTxnAnswer bounds a last-txn answer (a few thousand shards).
const maxTxnAnswer = 1 << 20

// Txn asks the storage node p for the last txn id and terms of its
// replicas of db's shards: one request for all of them (the master's
// question at failover). Shards the node does not host are absent.
func (c *Client) Txn(ctx context.Context, p Peer, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	q := url.Values{"db": {db}}
	for _, s := range shards {
		q.Add("shard", strconv.Itoa(s))
	}
	resp, err := c.do(ctx, p, http.MethodGet, "/internal/v1/txn?"+q.Encode(), "", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := readAll(resp.Body, maxTxnAnswer)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadAnswer, p, err)
	}
	var a TxnAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadAnswer, p, err)
	}
	out := make(map[int]models.ReplicaTxn, len(a.Shards))
	for s, v := range a.Shards {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: shard %q", ErrBadAnswer, p, s)
		}
		out[n] = v
	}
	return out, nil
}

// History fetches GET /internal/v1/history from the node p: its
// own metrics ring, as JSON of at most limit bytes (the caller validates
// it).
func (c *Client) History(ctx context.Context, p Peer, limit int64) ([]byte, error) {
	resp, err := c.do(ctx, p, http.MethodGet, "/internal/v1/history", "", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readAll(resp.Body, limit)
}
