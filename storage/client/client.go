// Package client is the typed client of a storage node's internal API (see
// storage/http.go for the server side): requests are values, refusals come
// back as the models sentinels their envelope codes name. Callers need not
// know the wire encoding (storage/engine's entry codec).
package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// Shard addresses one shard replica on one storage node.
type Shard struct {
	Address string // host:port of the node's HTTP listener
	DB      string
	Shard   int
}

// url is the internal API's address of op on s.
func (s Shard) url(op string, q url.Values) string {
	return fmt.Sprintf("http://%s/internal/v1/shards/%s/%d/%s?%s", s.Address, url.PathEscape(s.DB), s.Shard, op, q.Encode())
}

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

// Client calls storage nodes.
type Client struct {
	HTTP *http.Client
}

// Write sends one batch to the shard's leader at term; nil means it is
// durable on the in-sync replicas. A refusal is a *PeerError (models
// .ErrStaleTerm, ErrNotEnoughISR, ...); anything else is a transport error.
func (c *Client) Write(ctx context.Context, s Shard, term int64, points []lineproto.Point) error {
	body, err := engine.Entry{Term: uint64(term), Points: points}.MarshalBinary()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url("write", url.Values{"term": {strconv.FormatInt(term, 10)}}), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return &PeerError{Status: resp.StatusCode, Err: models.DecodeError(msg)}
}
