package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/broker/influx"
	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
)

var _ influx.Backend = (*Data)(nil)

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

// Database implements influx.Backend.
func (d *Data) Database(db string) (models.Database, error) {
	return d.database(d.State(), db)
}

// AwaitDatabase implements influx.Backend: it returns once the local state
// holds db with every shard online, or with ctx's error.
func (d *Data) AwaitDatabase(ctx context.Context, db string) error {
	for {
		// Subscribe before reading the state: a change after the read
		// closes changed.
		changed := d.Changed()
		st := d.State()
		if cfg, ok := st.Databases.Get(db); ok {
			online := 0
			for shard := range cfg.NumShards {
				if d.target(st, cfg, shard).online {
					online++
				}
			}
			if online == cfg.NumShards {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Select implements influx.Backend: every shard leader evaluates req over its
// series and answers partial aggregates (or raw points); the caller merges.
// Each call is one InfluxQL statement: it is recorded as a query.
func (d *Data) Select(ctx context.Context, db string, req *query.ShardRequest) (_ []*query.ShardResult, err error) {
	defer func(start time.Time) { d.recordQuery(db, start, err) }(time.Now())
	asked := req
	req = d.retained(db, req)
	if req.Start > req.End {
		return nil, nil // all of the range is past the retention
	}
	out, err := fanOut(ctx, d, db, func(ctx context.Context, t target, s client.Shard) (*query.ShardResult, error) {
		if d.Local != nil && t.leader == d.Self {
			return d.Local.Select(ctx, db, t.shard, req)
		}
		r, err := d.peers().Select(ctx, s, req)
		return r, statementErr(err)
	})
	if err == nil && req != asked && req.Interval == 0 {
		// Without GROUP BY time the one bucket is the range the query
		// named, wherever the retention made the shards start reading.
		for _, r := range out {
			for i := range r.Groups {
				for j := range r.Groups[i].Fields {
					r.Groups[i].Fields[j].First = asked.Start
				}
			}
		}
	}
	return out, err
}

// retained is req as the shards of db get it: with a retention, its start
// is no older than the retention at this moment (the plan keeps its own
// range, so a GROUP BY time still lays out its buckets from the start the
// query named: the expired ones are empty), unless a rollup level answers
// the part before it (query.PlanRollup).
func (d *Data) retained(db string, req *query.ShardRequest) *query.ShardRequest {
	cfg, ok := d.State().Databases.Get(db)
	if !ok {
		return req
	}
	now := d.clock()
	from, ok := retainedFrom(cfg, now)
	if !ok || req.Start >= from {
		return req
	}
	if r, ok := query.PlanRollup(req, cfg.Rollups, from, now); ok {
		return r // the part past the retention from a rollup level
	}
	r := *req
	r.Start = from
	return &r
}

// SeriesKeys implements influx.Backend; each call (a SHOW statement) is
// recorded as a query.
func (d *Data) SeriesKeys(ctx context.Context, db, measurement string) (_ models.SeriesList, err error) {
	defer func(start time.Time) { d.recordQuery(db, start, err) }(time.Now())
	parts, err := fanOut(ctx, d, db, func(ctx context.Context, _ target, s client.Shard) (models.SeriesList, error) {
		list, err := d.peers().Series(ctx, s, measurement, d.QueryMaxPoints)
		return list, statementErr(err)
	})
	if err != nil {
		return models.SeriesList{}, err
	}
	out := models.SeriesList{Types: models.FieldTypes{}}
	for _, p := range parts {
		if d.QueryMaxPoints > 0 && len(out.Keys)+len(p.Keys) > d.QueryMaxPoints {
			return models.SeriesList{}, fmt.Errorf("%w: the SHOW reads more than %d series (--query-max-points); name a measurement (FROM) or filter on tags (WHERE)", query.ErrTooLarge, d.QueryMaxPoints)
		}
		out.Keys = append(out.Keys, p.Keys...)
		out.Types.Add(p.Types)
	}
	return out, nil
}

// fanOut calls each shard leader of db, in parallel.
func fanOut[T any](ctx context.Context, d *Data, db string, call func(ctx context.Context, t target, s client.Shard) (T, error)) ([]T, error) {
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
			s, err := d.leaderOf(t, cfg)
			if err == nil {
				out[shard], err = call(ctx, t, s)
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

// leaderOf addresses the shard t on its online leader.
func (d *Data) leaderOf(t target, cfg models.Database) (client.Shard, error) {
	if !t.online {
		return client.Shard{}, fmt.Errorf("%w: shard %d of %q is offline", models.ErrUnavailable, t.shard, cfg.Name)
	}
	return client.Shard{Peer: client.Peer{ID: t.leader, Address: t.address}, DB: cfg.Name, Shard: t.shard}, nil
}

// statementErr maps a shard's refusal of an InfluxQL statement: a statement
// it cannot run is the statement's fault (query.ErrBadQuery with the
// shard's message), an answer over a bound query.ErrTooLarge; anything else
// is the cluster's, and the shard's code is not passed on.
func statementErr(err error) error {
	var peer *client.PeerError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, models.ErrTooLarge):
		return fmt.Errorf("%w: %s", query.ErrTooLarge, err)
	case errors.As(err, &peer) && (errors.Is(err, models.ErrBadQuery) || errors.Is(err, models.ErrBadInput)):
		return fmt.Errorf("%w: %s", query.ErrBadQuery, err)
	case errors.As(err, &peer):
		return fmt.Errorf("%w: shard answered %d: %s", models.ErrUnavailable, peer.Status, err)
	case errors.Is(err, client.ErrBadAnswer):
		return fmt.Errorf("%w: %s", models.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: shard leader unreachable: %w", models.ErrUnavailable, err)
}
