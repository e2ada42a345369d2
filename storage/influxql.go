package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/gin-gonic/gin"
)

// The InfluxQL side of the internal API (see http.go):
//   POST .../select   body: JSON query.ShardRequest; 200 query.MarshalResult bytes
//                     (partial aggregates per group and bucket, or raw points);
//                     400 {"error":{"code":"bad_query"|"too_large"|"bad_request","message"}}
//   GET  .../series?measurement=M   JSON array of the shard's series keys (of M only when given);
//                     with types=1, a models.SeriesList: the keys and their fields' types

// maxSelectBody bounds a ShardRequest: it is a few hundred bytes in practice.
const maxSelectBody = 1 << 20

// maxSeriesList bounds the series keys one shard lists for a SHOW statement.
const maxSeriesList = 1_000_000

var errTooManySeries = errors.New("too many series")

func (h *Host) handleSelect(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	var req query.ShardRequest
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxSelectBody+1))
	if err == nil && len(body) > maxSelectBody {
		err = errors.New("request too large")
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		replyErr(c, fmt.Errorf("%w: select request: %w", models.ErrBadInput, err))
		return
	}
	res, err := evaluate(c.Request.Context(), r.eng, &req)
	switch {
	case errors.Is(err, query.ErrTooLarge):
		replyBadQuery(c, models.Mark(err, models.ErrTooLarge))
		return
	case errors.Is(err, query.ErrBadQuery), errors.Is(err, query.ErrUnsupported):
		replyBadQuery(c, models.Mark(err, models.ErrBadQuery))
		return
	case err != nil:
		replyErr(c, err)
		return
	}
	c.Data(http.StatusOK, "application/octet-stream", query.MarshalResult(res, req.Stats))
}

func (h *Host) handleSeries(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	var prefix string
	if m := c.Query("measurement"); m != "" {
		prefix = string(lineproto.AppendMetricPrefix(nil, m))
	}
	limit := maxSeriesList
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			replyErr(c, fmt.Errorf("%w: limit %q: want a whole number of at least 1", models.ErrBadInput, raw))
			return
		}
		limit = min(n, limit)
	}
	ctx := c.Request.Context()
	keys := []string{}
	err := r.eng.SeriesKeys(func(k string) error {
		if prefix == "" || strings.HasPrefix(k, prefix) && len(k) > len(prefix) && (k[len(prefix)] == ',' || k[len(prefix)] == '#') {
			if len(keys) == limit {
				return errTooManySeries
			}
			keys = append(keys, k)
		}
		return ctx.Err() // the broker gave up (timeout, client gone)
	})
	if errors.Is(err, errTooManySeries) {
		replyBadQuery(c, fmt.Errorf("%w: more than %d series in shard %s: name a measurement (FROM) or raise --query-max-points", models.ErrTooLarge, limit, r.id))
		return
	}
	if err != nil {
		replyErr(c, err)
		return
	}
	if c.Query("types") == "" {
		c.JSON(http.StatusOK, keys)
		return
	}
	types := models.FieldTypes{}
	for _, k := range keys {
		m, _, _, err := lineproto.ParseSeriesKey(k)
		if err == nil && types[m] == nil {
			types[m] = r.eng.FieldTypes(m)
		}
	}
	c.JSON(http.StatusOK, models.SeriesList{Keys: keys, Types: types})
}

// replyBadQuery answers a statement's refusal with err's code from
// models.Codes, always with 400: the InfluxQL side of the API answered a
// too-large statement 400 from the start, and brokers of that version still
// read it so.
func replyBadQuery(c *gin.Context, err error) {
	_, body := models.Envelope(err)
	c.AbortWithStatusJSON(http.StatusBadRequest, body)
}

// Select evaluates an InfluxQL shard request on a replica hosted here: the
// in-process path for a broker in the same process as the leader, which
// skips encoding the partials.
func (h *Host) Select(ctx context.Context, db string, shard int, req *query.ShardRequest) (*query.ShardResult, error) {
	r, err := h.hosted(db, shard)
	if err != nil {
		return nil, err
	}
	return evaluate(ctx, r.eng, req)
}

// evaluate runs req over a shard through the engine's streaming scan, until
// ctx ends: a broker whose query timed out or whose client left cancels it.
func evaluate(ctx context.Context, eng engine.Shard, req *query.ShardRequest) (*query.ShardResult, error) {
	src, ok := eng.(engine.Scanner)
	if !ok {
		return nil, fmt.Errorf("%w: this shard's engine has no streaming scan", query.ErrUnsupported)
	}
	var qs query.Source = ctxScanner{src, ctx}
	if b, ok := eng.(engine.Bounder); ok {
		qs = ctxBounder{ctxScanner{src, ctx}, b}
	}
	if ro, ok := eng.(engine.Rollups); ok && req.Rollup > 0 {
		qs = ctxRollups{ctxScanner{src, ctx}, ro}
	}
	res, err := query.Evaluate(qs, req)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("shard query stopped: %w", context.Cause(ctx))
	}
	return res, err
}

// ctxScanner stops a scan once its context ends: at the next series
// offered, so a query stops within one series' points.
type ctxScanner struct {
	engine.Scanner
	ctx context.Context
}

func (s ctxScanner) Scan(metric string, match map[string]string, start, end int64, keep func(string) bool, visit func(string, []engine.SeriesPoint) error) error {
	return s.Scanner.Scan(metric, match, start, end, func(key string) bool {
		return s.ctx.Err() == nil && keep(key)
	}, visit)
}

// ctxBounder is a ctxScanner whose engine knows its series' time spans
// (a streamed select's Bounds requests).
type ctxBounder struct {
	ctxScanner
	b engine.Bounder
}

func (s ctxBounder) Bounds(metric string, match map[string]string, keep func(string) bool) (int64, int64, bool, error) {
	return s.b.Bounds(metric, match, func(key string) bool {
		return s.ctx.Err() == nil && keep(key)
	})
}

// ctxRollups is a ctxScanner whose engine keeps rollup levels (a request
// answered from one).
type ctxRollups struct {
	ctxScanner
	r engine.Rollups
}

func (s ctxRollups) ScanRollup(interval time.Duration, metric string, match map[string]string, start, end int64,
	keep func(string) bool, visit func(string, []models.RollupCell) error) error {
	return s.r.ScanRollup(interval, metric, match, start, end, func(key string) bool {
		return s.ctx.Err() == nil && keep(key)
	}, visit)
}
