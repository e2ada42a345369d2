package storage

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
)

// The internal replication and data API of a storage node (its client and
// wire format: storage/client), under
// /internal/v1/shards/{db}/{shard}/...:
//   POST .../write?term=T            body: one encoded engine.Entry (txn 0), points or a delete; 204 once durable on the in-sync replicas
//   GET  .../log?term&node&after&after_term&wait_ms   followers' pull; 200 length-prefixed entries,
//        205 + X-Cairn-Truncate-To (diverged log), 410 (full sync needed)
//   GET  .../snapshot?term=T          the full replica
//   POST .../leave?term=T&node=N      a stopping follower leaves the in-sync set
//   GET  .../query?metric&start&end&tag=k:v[&max_series&max_points]   JSON []engine.Series,
//        with X-Cairn-Series and X-Cairn-Points counting it; 413 past the limits
//        (the caller's, capped by this node's own)
//   POST .../select, GET .../series   InfluxQL evaluation (influxql.go)
//   POST /internal/v1/fetch            a follower's batched pull of every shard it follows from
//        this node (see fetchserve.go)
//   GET  /internal/v1/txn?db=D&shard=N...   the master's question at failover:
//        {"shards":{"N":{"last_txn_id","last_term","term"}}} for the hosted ones
//   POST /internal/v1/txns   the same question for many databases at once (client.Txns):
//        body {"dbs":{"D":[N,...]}}, answer {"dbs":{"D":{"N":{...}}}}
// 409 means a stale term (the caller refreshes its view), 404 a shard not hosted.

// Routes mounts the internal API.
func (h *Host) Routes(r gin.IRouter) {
	g := r.Group("/internal/v1/shards/:db/:shard")
	g.POST("/write", h.handleWrite)
	g.GET("/log", h.handleLog)
	g.GET("/snapshot", h.handleSnapshot)
	g.POST("/leave", h.handleLeave)
	g.GET("/query", h.handleQuery)
	g.POST("/select", h.handleSelect)
	g.GET("/series", h.handleSeries)
	r.GET("/internal/v1/txn", h.handleTxn)
	r.POST("/internal/v1/txns", h.handleTxns)
	r.POST("/internal/v1/fetch", h.handleFetch)
}

// replyErr answers with err's status and code from models.Codes (the
// replication sentinels wrap models'); a query over the engine's limits is
// models.ErrTooLarge.
func replyErr(c *gin.Context, err error) {
	if errors.Is(err, engine.ErrTooLarge) {
		err = models.Mark(err, models.ErrTooLarge)
	}
	status, body := models.Envelope(err)
	c.AbortWithStatusJSON(status, body)
}

func (h *Host) replicaOf(c *gin.Context) (*replica, bool) {
	shard, err := strconv.Atoi(c.Param("shard"))
	if err != nil {
		replyErr(c, fmt.Errorf("%w: bad shard id", models.ErrBadInput))
		return nil, false
	}
	r := h.get(c.Param("db"), shard)
	if r == nil {
		replyErr(c, fmt.Errorf("%w: %s/%d on %s", ErrNotHosted, c.Param("db"), shard, h.nodeID))
		return nil, false
	}
	return r, true
}

func queryInt(c *gin.Context, name string) int64 {
	v, _ := strconv.ParseInt(c.Query(name), 10, 64)
	return v
}

// readBody reads a request body of at most limit bytes: past it (or
// past the server's own body bound) the error is models.ErrTooLarge, naming
// what the body is; another read error is models.ErrBadInput.
func readBody(body io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig) || int64(len(b)) > limit:
		return nil, fmt.Errorf("%w: %s of more than %d bytes", models.ErrTooLarge, what, limit)
	case err != nil:
		return nil, models.Mark(err, models.ErrBadInput)
	}
	return b, nil
}

func (h *Host) handleWrite(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		replyErr(c, err)
		return
	}
	var e engine.Entry
	if err := e.UnmarshalBinary(body); err != nil {
		replyErr(c, models.Mark(err, models.ErrBadInput))
		return
	}
	write := func() error { return r.write(c.Request.Context(), queryInt(c, "term"), e.Points, nil) }
	if e.Delete != nil {
		write = func() error { return r.delete(c.Request.Context(), queryInt(c, "term"), e.Delete) }
	}
	if err := write(); err != nil {
		replyErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (h *Host) handleLog(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	after, _ := strconv.ParseUint(c.Query("after"), 10, 64)
	afterTerm, _ := strconv.ParseUint(c.Query("after_term"), 10, 64)
	wait := time.Duration(min(queryInt(c, "wait_ms"), 5000)) * time.Millisecond
	res, err := r.fetch(c.Request.Context(), fetchReq{term: queryInt(c, "term"), node: c.Query("node"), after: after, afterTerm: afterTerm, max: 64, wait: wait})
	if err != nil {
		replyErr(c, err)
		return
	}
	switch {
	case res.fullSync:
		c.Status(http.StatusGone)
		return
	case res.truncateTo != nil:
		c.Header(client.HeaderTruncateTo, strconv.FormatUint(*res.truncateTo, 10))
		c.Status(http.StatusResetContent)
		return
	}
	c.Status(http.StatusOK)
	c.Header("Content-Type", "application/octet-stream")
	var buf []byte
	for _, e := range res.entries {
		data, _ := e.MarshalBinary()
		if _, err := c.Writer.Write(client.AppendEntry(buf[:0], data)); err != nil {
			return
		}
	}
}

func (h *Host) handleSnapshot(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	r.mu.Lock()
	leading := r.want.role == roleLeader && r.want.term == queryInt(c, "term")
	r.mu.Unlock()
	if !leading {
		replyErr(c, fmt.Errorf("%w: not leading %s at that term", ErrStaleTerm, r.id))
		return
	}
	// A follower names the protocol it speaks (0.1.0's does not): one
	// older than packs gets no snapshot of a file that holds them, one
	// older than partitions none of a sealed shard.
	snapshot := r.eng.Snapshot
	if sw, ok := r.eng.(snapshotUpTo); ok {
		switch p := queryInt(c, "protocol"); {
		case p < models.ProtocolPacks:
			snapshot = func(w io.Writer) error { return sw.SnapshotUpTo(w, engine.PackFormat-1) }
		case p < models.ProtocolPartitions:
			snapshot = func(w io.Writer) error { return sw.SnapshotUpTo(w, engine.PartFormat-1) }
		}
	}
	c.Status(http.StatusOK)
	c.Header("Content-Type", "application/octet-stream")
	if err := snapshot(c.Writer); err != nil {
		// A refusal comes before the first byte (the check is the
		// snapshot's first step): it still gets a status of its own.
		if errors.Is(err, engine.ErrFormatTooNew) && !c.Writer.Written() {
			c.Writer.Header().Del("Content-Type")
			replyErr(c, models.Mark(err, models.ErrConflict))
			h.lg.Warn("snapshot refused to a follower of an older release", zap.String("shard", r.id), zap.Error(err))
			return
		}
		h.lg.Warn("snapshot failed", zap.String("shard", r.id), zap.Error(err))
	}
}

// snapshotUpTo is implemented by the engine's shards: a snapshot refused
// when the file's format is newer than a peer reads.
type snapshotUpTo interface {
	SnapshotUpTo(w io.Writer, maxFormat uint64) error
}

func (h *Host) handleLeave(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	if err := r.leave(c.Request.Context(), queryInt(c, "term"), c.Query("node")); err != nil {
		replyErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (h *Host) handleQuery(c *gin.Context) {
	r, ok := h.replicaOf(c)
	if !ok {
		return
	}
	match := map[string]string{}
	for _, t := range c.QueryArray("tag") {
		k, v, _ := strings.Cut(t, ":")
		match[k] = v
	}
	lim := h.cfg.QueryLimits.Tighter(engine.Limits{MaxSeries: int(queryInt(c, "max_series")), MaxPoints: int(queryInt(c, "max_points"))})
	series, err := r.eng.QueryLimited(c.Query("metric"), match, queryInt(c, "start"), queryInt(c, "end"), lim)
	if err != nil {
		replyErr(c, err)
		return
	}
	n := 0
	for _, sr := range series {
		n += len(sr.Points)
	}
	c.Header(client.HeaderSeries, strconv.Itoa(len(series)))
	c.Header(client.HeaderPoints, strconv.Itoa(n))
	c.Data(http.StatusOK, "application/json", engine.AppendSeriesJSON(nil, series))
}
