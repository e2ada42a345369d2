package influx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
	"github.com/influxdata/influxql"
)

// MaxStatements bounds the statements of one /query request.
const MaxStatements = 100

// epochs maps /query's epoch parameter to nanoseconds per unit.
var epochs = map[string]int64{"ns": 1, "n": 1, "u": 1e3, "µ": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}

// statement is one planned statement of a request.
type statement struct {
	stmt influxql.Statement
	sel  *query.Plan
	show *query.ShowPlan
	onDB string // SHOW ... ON db
	ddl  ddl    // databases and retention policies (ddl.go)
}

// request is a /query request once read and parsed.
type request struct {
	stmts     []influxql.Statement
	db        string
	f         format
	chunked   bool
	chunkSize int
}

// query is GET|POST /query?db=&q=&epoch=&chunked=&chunk_size=&pretty=.
// A request that does not parse is refused whole (400), as InfluxDB does;
// otherwise every statement gets its own result or error with 200 (a
// dashboard panel's one unsupported statement must not blank the others),
// except that a statement whose answer would pass a limit gets 413 while
// nothing has been sent.
func (h *Handler) query(c *gin.Context) {
	c.Header("X-Influxdb-Version", Version)
	req, ok := h.readQuery(c)
	if !ok {
		return
	}
	now := h.cfg.Now()
	plans := make([]statement, len(req.stmts))
	planErrs := make([]error, len(req.stmts))
	for i, stmt := range req.stmts {
		plans[i], planErrs[i] = planStatement(stmt, now)
		if errors.Is(planErrs[i], query.ErrTooLarge) {
			v1Error(c, http.StatusRequestEntityTooLarge, planErrs[i].Error())
			return
		}
	}
	if err := h.authorize(c.Request, req.stmts); err != nil {
		h.Refuse(c, refusal(err), err)
		return
	}
	var out responder = &buffered{c: c, f: req.f}
	var ch *chunked
	if req.chunked {
		ch = &chunked{c: c, f: req.f, size: req.chunkSize}
		out = ch
	}
	// The budget covers every statement of the request and every shard's
	// part of it: the shards' requests carry this context.
	ctx, cancel := context.WithTimeout(c.Request.Context(), h.cfg.QueryTimeout)
	defer cancel()
	// The server's write timeout would cut a streamed answer that the query
	// timeout still allows; a client that stops reading is cut after it.
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(h.cfg.QueryTimeout + 5*time.Second))
	for i, st := range plans {
		err := planErrs[i]
		var rows []query.Row
		var w *seriesStream
		switch {
		case err != nil:
		case ch != nil && !req.f.pretty && st.sel != nil && st.sel.Streamable():
			// Page by page, not bounded by --query-max-points (stream.go).
			w = ch.series(i)
			err = h.stream(ctx, req.db, st.sel, w)
		case ch == nil && st.sel != nil && st.sel.Limit > 0 && st.sel.Streamable():
			// Only the pages LIMIT needs, not every point of the range.
			sink := &rowSink{}
			err = h.stream(ctx, req.db, st.sel, sink)
			rows = sink.rows()
		default:
			rows, err = h.run(ctx, req.db, st)
			if st.sel != nil && st.sel.Location != nil {
				for i := range rows {
					rows[i].Loc = st.sel.Location
				}
			}
		}
		if errors.Is(err, query.ErrTooLarge) && !out.started() {
			v1Error(c, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		errText := ""
		if err != nil {
			errText = h.statementErr(ctx, err, req.db)
		}
		if w != nil {
			w.end(errText)
			continue
		}
		out.statement(i, rows, errText)
	}
	out.finish()
}

// readQuery reads a /query request's parameters and parses its statements,
// answering the error itself when they do not (ok false).
func (h *Handler) readQuery(c *gin.Context) (req request, ok bool) {
	limitQueryBody(c.Writer, c.Request, h.cfg.QueryMaxBytes)
	if err := c.Request.ParseForm(); err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			v1Error(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: the request body passes %d bytes (--query-max-bytes)", errQueryTooLarge, maxErr.Limit))
			return req, false
		}
		v1Error(c, http.StatusBadRequest, "error parsing the request: "+err.Error())
		return req, false
	}
	form := c.Request.Form
	q := form.Get("q")
	if strings.TrimSpace(q) == "" {
		v1Error(c, http.StatusBadRequest, `missing required parameter "q"`)
		return req, false
	}
	if err := checkQueryText(q, h.cfg.QueryMaxBytes); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errQueryTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		v1Error(c, status, err.Error())
		return req, false
	}
	req.db = form.Get("db")
	// InfluxDB reads pretty from the URL only, not from a form body.
	req.f.pretty = c.Request.URL.Query().Get("pretty") == "true"
	if e := form.Get("epoch"); e != "" {
		if req.f.unit, ok = epochs[e]; !ok {
			v1Error(c, http.StatusBadRequest, fmt.Sprintf("invalid epoch %q (use ns, u, ms, s, m or h)", e))
			return req, false
		}
	}
	req.chunked, req.chunkSize = form.Get("chunked") == "true", DefaultChunkSize
	if raw := form.Get("chunk_size"); raw != "" {
		if n, err := strconv.Atoi(raw); err == nil && n > 0 {
			req.chunkSize = n
		}
	}
	p := influxql.NewParser(strings.NewReader(q))
	if raw := form.Get("params"); raw != "" {
		var params map[string]any
		if err := json.Unmarshal([]byte(raw), &params); err != nil {
			v1Error(c, http.StatusBadRequest, "error parsing query parameters: "+err.Error())
			return req, false
		}
		p.SetParams(params)
	}
	parsed, err := p.ParseQuery()
	if err != nil {
		v1Error(c, http.StatusBadRequest, "error parsing query: "+err.Error())
		return req, false
	}
	if len(parsed.Statements) > MaxStatements {
		v1Error(c, http.StatusBadRequest, fmt.Sprintf("%d statements in one request (at most %d)", len(parsed.Statements), MaxStatements))
		return req, false
	}
	req.stmts = parsed.Statements
	return req, true
}

func planStatement(stmt influxql.Statement, now time.Time) (statement, error) {
	st := statement{stmt: stmt}
	var err error
	switch s := stmt.(type) {
	case *influxql.SelectStatement:
		st.sel, err = query.PlanSelect(s, now)
	case *influxql.ShowMeasurementsStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowTagKeysStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowTagValuesStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowFieldKeysStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowSeriesStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowSeriesCardinalityStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	case *influxql.ShowMeasurementCardinalityStatement:
		st.show, st.onDB, err = showPlan(stmt, s.Database, now)
	default:
		if st.ddl, err = planDDL(stmt); st.ddl == nil && err == nil {
			err = fmt.Errorf("%w: the statement %s", query.ErrUnsupported, firstWords(stmt.String()))
		}
	}
	return st, err
}

// showPlan plans a SHOW over series; on is its ON database, if any.
func showPlan(stmt influxql.Statement, on string, now time.Time) (*query.ShowPlan, string, error) {
	p, err := query.PlanShow(stmt, now)
	return p, on, err
}

// firstWords names a statement by its keywords (SHOW USERS, DROP SERIES...).
func firstWords(s string) string {
	words := strings.Fields(s)
	return strings.Join(words[:min(len(words), 2)], " ")
}

func (h *Handler) run(ctx context.Context, db string, st statement) ([]query.Row, error) {
	switch {
	case st.ddl != nil:
		return st.ddl(ctx, h, db)
	case st.sel != nil:
		if st.sel.DB != "" {
			db = st.sel.DB
		}
		if db == "" {
			return nil, errDBRequired
		}
		return h.selectRows(ctx, db, st.sel)
	default:
		if st.onDB != "" {
			db = st.onDB
		}
		if db == "" {
			return nil, errDBRequired
		}
		list, err := h.cfg.Backend.SeriesKeys(ctx, db, st.show.Measurement())
		if err != nil {
			return nil, err
		}
		series, err := query.ParseSeries(list.Keys)
		if err != nil {
			return nil, err
		}
		return st.show.Run(series, list.Types), nil
	}
}

// selectRows runs a SELECT over each measurement it reads.
func (h *Handler) selectRows(ctx context.Context, db string, p *query.Plan) ([]query.Row, error) {
	if p.Sub != nil {
		inner, err := h.selectRows(ctx, db, p.Sub)
		if err != nil {
			return nil, err
		}
		return p.MergeSubquery(inner)
	}
	var existing []string
	if p.NeedsMeasurements() {
		list, err := h.cfg.Backend.SeriesKeys(ctx, db, "")
		if err != nil {
			return nil, err
		}
		series, err := query.ParseSeries(list.Keys)
		if err != nil {
			return nil, err
		}
		for i, s := range series {
			if i == 0 || s.Measurement != series[i-1].Measurement {
				existing = append(existing, s.Measurement)
			}
		}
	}
	names, err := p.Measurements(existing)
	if err != nil {
		return nil, err
	}
	per := make([][]query.Row, 0, len(names))
	for _, m := range names {
		one := p.For(m)
		parts, err := h.cfg.Backend.Select(ctx, db, &one.Req)
		if err != nil {
			return nil, err
		}
		rows, err := one.Merge(parts)
		if err != nil {
			return nil, err
		}
		per = append(per, rows)
	}
	return p.Combine(per), nil
}

var errDBRequired = errors.New("database name required")

func (h *Handler) statementErr(ctx context.Context, err error, db string) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("query-timeout limit exceeded (%s, --query-timeout)", h.cfg.QueryTimeout)
	case errors.Is(err, models.ErrNotFound):
		return fmt.Sprintf("database not found: %s", db)
	case errors.Is(err, errDBRequired):
		return err.Error()
	}
	return err.Error()
}
