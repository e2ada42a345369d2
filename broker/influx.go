package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/influx"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/query"
)

var _ influx.Backend = (*Data)(nil)

// maxShardAnswer bounds what one shard may send back for one statement.
const maxShardAnswer = 1 << 30

// Databases implements influx.Backend.
func (d *Data) Databases() []string {
	st := d.State()
	names := make([]string, 0, st.Databases.Len())
	for n := range st.Databases.All() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ReplicaFactor implements influx.Backend.
func (d *Data) ReplicaFactor(db string) (int, error) {
	cfg, err := d.database(d.State(), db)
	if err != nil {
		return 0, err
	}
	return cfg.ReplicaFactor, nil
}

// Select implements influx.Backend: every shard leader evaluates req over its
// series and answers partial aggregates (or raw points); the caller merges.
// Each call is one InfluxQL statement: it is recorded as a query.
func (d *Data) Select(ctx context.Context, db string, req *query.ShardRequest) (_ []*query.ShardResult, err error) {
	defer func(start time.Time) { d.recordQuery(db, start, err) }(time.Now())
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return fanOut(ctx, d, db, func(ctx context.Context, t target, base string) (*query.ShardResult, error) {
		if d.LocalSelect != nil && t.leader == d.Self {
			return d.LocalSelect(db, t.shard, req)
		}
		data, err := d.shardCall(ctx, http.MethodPost, base+"/select", body)
		if err != nil {
			return nil, err
		}
		r, err := query.UnmarshalResult(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", models.ErrUnavailable, err)
		}
		return r, nil
	})
}

// SeriesKeys implements influx.Backend; each call (a SHOW statement) is
// recorded as a query.
func (d *Data) SeriesKeys(ctx context.Context, db, measurement string) (_ []string, err error) {
	defer func(start time.Time) { d.recordQuery(db, start, err) }(time.Now())
	parts, err := fanOut(ctx, d, db, func(ctx context.Context, _ target, base string) ([]string, error) {
		data, err := d.shardCall(ctx, http.MethodGet, base+"/series?measurement="+url.QueryEscape(measurement), nil)
		if err != nil {
			return nil, err
		}
		var keys []string
		if err := json.Unmarshal(data, &keys); err != nil {
			return nil, fmt.Errorf("%w: series list: %w", models.ErrUnavailable, err)
		}
		return keys, nil
	})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, p := range parts {
		keys = append(keys, p...)
	}
	return keys, nil
}

// fanOut calls each shard leader of db at its internal base URL, in parallel.
func fanOut[T any](ctx context.Context, d *Data, db string, call func(ctx context.Context, t target, base string) (T, error)) ([]T, error) {
	st := d.State()
	cfg, err := d.database(st, db)
	if err != nil {
		return nil, err
	}
	out := make([]T, cfg.NumShards)
	errs := make([]error, cfg.NumShards)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for shard := range cfg.NumShards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := d.target(st, cfg, shard)
			base, err := d.shardBase(t, cfg)
			if err == nil {
				out[shard], err = call(ctx, t, base)
			}
			if err != nil {
				errs[shard] = err
				cancel() // one failed shard fails the statement: stop the others
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (d *Data) shardBase(t target, cfg models.Database) (string, error) {
	if !t.online {
		return "", fmt.Errorf("%w: shard %d of %q is offline", models.ErrUnavailable, t.shard, cfg.Name)
	}
	return fmt.Sprintf("http://%s/internal/v1/shards/%s/%d", t.address, cfg.Name, t.shard), nil
}

// shardCall sends one internal request; a 400 is the statement's fault
// (ErrBadInput with the shard's message), anything else but 200 the cluster's.
func (d *Data) shardCall(ctx context.Context, method, u string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: shard leader unreachable: %w", models.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxShardAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: shard answer: %w", models.ErrUnavailable, err)
	case len(data) > maxShardAnswer:
		return nil, fmt.Errorf("%w: a shard's answer passed %d bytes", query.ErrTooLarge, maxShardAnswer)
	case resp.StatusCode == http.StatusBadRequest && errCode(data) == "too_large":
		return nil, fmt.Errorf("%w: %s", query.ErrTooLarge, errMessage(data))
	case resp.StatusCode == http.StatusBadRequest:
		return nil, fmt.Errorf("%w: %s", query.ErrBadQuery, errMessage(data))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: %s: %s", models.ErrUnavailable, resp.Status, errMessage(data))
	}
	return data, nil
}

// errCode is the code of an internal API error envelope, "" if none.
func errCode(body []byte) string {
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &env)
	return env.Error.Code
}
