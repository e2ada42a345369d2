package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
)

// QueryRequest is one shard's part of GET /api/v1/query.
type QueryRequest struct {
	Metric     string
	Start, End int64 // unix ns, inclusive
	Tags       map[string]string
	// MaxSeries and MaxPoints are the caller's limits (0: none); the node
	// applies the tighter of them and its own.
	MaxSeries, MaxPoints int
}

// QueryAnswer is a shard's answer, counted before it is read: Body is a
// JSON array of series, unread (the caller closes it).
type QueryAnswer struct {
	Series, Points int
	Body           io.ReadCloser
}

// Query asks the shard's leader for the series of r (GET .../query). Over
// the limits is models.ErrTooLarge.
func (c *Client) Query(ctx context.Context, s Shard, r QueryRequest) (*QueryAnswer, error) {
	q := url.Values{}
	q.Set("metric", r.Metric)
	q.Set("start", strconv.FormatInt(r.Start, 10))
	q.Set("end", strconv.FormatInt(r.End, 10))
	for k, v := range r.Tags {
		q.Add("tag", k+":"+v)
	}
	if r.MaxSeries > 0 {
		q.Set("max_series", strconv.Itoa(r.MaxSeries))
	}
	if r.MaxPoints > 0 {
		q.Set("max_points", strconv.Itoa(r.MaxPoints))
	}
	resp, err := c.do(ctx, s.Peer, http.MethodGet, s.path("query", q), "", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	series, err1 := count(resp.Header.Get(HeaderSeries))
	points, err2 := count(resp.Header.Get(HeaderPoints))
	if err1 != nil || err2 != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: query answer of %s with bad counts", ErrBadAnswer, s)
	}
	return &QueryAnswer{Series: series, Points: points, Body: resp.Body}, nil
}

// count reads a count header; a node that sends none counts 0 (the broker
// then bounds the answer as it reads it).
func count(h string) (int, error) {
	if h == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(h)
	if err == nil && n < 0 {
		err = strconv.ErrRange
	}
	return n, err
}

// Select has the shard's leader evaluate an InfluxQL shard request (POST
// .../select) and returns its partial aggregates or raw points. A statement
// the node cannot run is models.ErrBadQuery (or ErrBadInput), an answer
// over a bound models.ErrTooLarge.
func (c *Client) Select(ctx context.Context, s Shard, r *query.ShardRequest) (*query.ShardResult, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, s.Peer, http.MethodPost, s.path("select", nil), "application/json", bytes.NewReader(body), http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := readAll(resp.Body, maxAnswer)
	if err != nil {
		return nil, fmt.Errorf("select answer of %s: %w", s, err)
	}
	res, err := query.UnmarshalResult(data)
	if err != nil {
		return nil, fmt.Errorf("%w: select answer of %s: %w", ErrBadAnswer, s, err)
	}
	return res, nil
}

// Series lists the shard's series keys, of measurement only when it is not
// "" (GET .../series), with the types of their fields: SHOW statements. A
// shard holding more than limit (when > 0) answers models.ErrTooLarge. A
// node of the release before answers the keys alone: its fields are
// floats, the only type it stores.
func (c *Client) Series(ctx context.Context, s Shard, measurement string, limit int) (models.SeriesList, error) {
	q := url.Values{"types": {"1"}}
	if measurement != "" {
		q.Set("measurement", measurement)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var list models.SeriesList
	resp, err := c.do(ctx, s.Peer, http.MethodGet, s.path("series", q), "", nil, http.StatusOK)
	if err != nil {
		return list, err
	}
	defer resp.Body.Close()
	data, err := readAll(resp.Body, maxAnswer)
	if err != nil {
		return list, fmt.Errorf("series answer of %s: %w", s, err)
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(data, &list.Keys)
	} else {
		err = json.Unmarshal(data, &list)
	}
	if err != nil {
		return models.SeriesList{}, fmt.Errorf("%w: series answer of %s: %w", ErrBadAnswer, s, err)
	}
	return list, nil
}
