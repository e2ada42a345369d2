// Package influx speaks InfluxDB's HTTP protocols on a broker, so stock
// clients (influx CLI, influxdb1-client, influxdb-client-go, Telegraf,
// Grafana's InfluxDB datasource) work unmodified: the 1.x and 2.x write
// endpoints, /ping, and /query answering InfluxQL (planned and merged by the
// query package) in InfluxDB's JSON. Errors use InfluxDB's shapes, not Cairn's
// /api/v1 envelope: {"error":"..."} for 1.x, {"code","message"} for 2.x.
package influx

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
)

// Version is what /ping and every answer report in X-Influxdb-Version: the
// InfluxDB release whose 1.x API Cairn follows. Clients only log it.
const Version = "1.8.10"

// Backend is the broker's data plane as these endpoints need it.
type Backend interface {
	// Write parses and stores a line-protocol body; precision is ns, us, ms,
	// s, m or h. Errors wrap models.ErrNotFound (database), ErrBadInput (a
	// bad line, naming it) or ErrUnavailable. Once it returned nil nothing
	// refers to body any more: the caller may reuse it (ReleaseBody).
	Write(ctx context.Context, db, precision string, body []byte) error
	// Databases lists the databases.
	Databases() []string
	// Database is db's definition; models.ErrNotFound if none.
	Database(db string) (models.Database, error)
	// AwaitDatabase waits until db is known and every shard of it online.
	AwaitDatabase(ctx context.Context, db string) error
	// Select runs req on every shard leader of db.
	Select(ctx context.Context, db string, req *query.ShardRequest) ([]*query.ShardResult, error)
	// Delete logs del on every shard of db, like a write: nil once it is
	// durable on every shard's in-sync replicas.
	Delete(ctx context.Context, db string, del *wire.Delete) error
	// SeriesKeys lists db's series keys (of measurement only, when not ""),
	// with the types of their fields.
	SeriesKeys(ctx context.Context, db, measurement string) (models.SeriesList, error)
}

// Config of the handlers.
type Config struct {
	Backend Backend
	Logger  *zap.Logger
	// MaxBodyBytes caps a write body after gzip decompression; default 32 MiB.
	MaxBodyBytes int64
	// Now is the clock behind now() in queries; default time.Now.
	Now func() time.Time
	// QueryMaxBytes bounds a /query statement's text (413 past it);
	// default DefaultQueryMaxBytes.
	QueryMaxBytes int
	// QueryTimeout bounds the run of one /query request, its shards' work
	// included; default DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Admin applies CREATE/DROP DATABASE and the retention policy
	// statements; nil refuses them.
	Admin Admin
	// Defaults shape the databases CREATE DATABASE makes.
	Defaults Defaults
	// Authorize checks that a request carries the admin (or, with admin
	// false, the write) scope a statement needs, wrapping
	// models.ErrUnauthorized or models.ErrForbidden; nil: every scope open.
	Authorize func(r *http.Request, admin bool) error
	// PagePoints is about how many points a streamed raw select reads at a
	// time (chunked=true); default PagePoints.
	PagePoints int
}

// DefaultQueryTimeout is Config.QueryTimeout's default.
const DefaultQueryTimeout = time.Minute

// Handler serves the InfluxDB-compatible endpoints.
type Handler struct {
	cfg Config
	lg  *zap.Logger
}

// New returns the handlers.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.QueryMaxBytes <= 0 {
		cfg.QueryMaxBytes = DefaultQueryMaxBytes
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.PagePoints <= 0 {
		cfg.PagePoints = PagePoints
	}
	return &Handler{cfg: cfg, lg: cfg.Logger.Named("influx")}
}

// Routes mounts the write endpoints on writes and the read ones on queries,
// two groups so each can carry its own authorization scope.
func (h *Handler) Routes(writes, queries, open gin.IRouter) {
	writes.POST("/write", h.writeV1)
	writes.POST("/api/v2/write", h.writeV2)
	queries.GET("/query", h.query)
	queries.POST("/query", h.query)
	queries.POST("/api/v2/query", h.flux)
	open.GET("/ping", h.ping)
	open.HEAD("/ping", h.ping)
}

// flux answers InfluxDB 2.x's Flux endpoint: Cairn speaks InfluxQL only,
// and says where, rather than a bare 404 that reads as a wrong URL.
func (h *Handler) flux(c *gin.Context) {
	c.Header("X-Influxdb-Version", Version)
	v2Error(c, http.StatusNotImplemented, "not implemented",
		"Flux is not supported: use InfluxQL at /query (GET or POST /query?db=<database>&q=<statements>)")
}

func (h *Handler) ping(c *gin.Context) {
	c.Header("X-Influxdb-Version", Version)
	c.Header("X-Influxdb-Build", "OSS")
	if c.Query("verbose") == "true" {
		c.JSON(http.StatusOK, gin.H{"version": Version})
		return
	}
	c.Status(http.StatusNoContent)
}

// v1Error answers InfluxDB 1.x's error shape.
// Refuse answers a request the node's tokens refused (401: no or unknown
// token, 403: a narrower one) as InfluxDB does: {"code","message"} on the
// 2.x endpoints, {"error"} on the 1.x ones and /query.
func (h *Handler) Refuse(c *gin.Context, status int, err error) {
	if strings.HasPrefix(c.Request.URL.Path, "/api/v2/") {
		code := "unauthorized"
		if status == http.StatusForbidden {
			code = "forbidden"
		}
		c.Header("X-Influxdb-Version", Version)
		v2Error(c, status, code, err.Error())
		return
	}
	v1Error(c, status, err.Error())
}

func v1Error(c *gin.Context, status int, msg string) {
	c.Header("X-Influxdb-Version", Version)
	c.Header("X-Influxdb-Error", msg)
	// One JSON line, as InfluxDB's response writer ends every answer.
	b, _ := json.Marshal(map[string]string{"error": msg})
	c.Data(status, "application/json", append(b, '\n'))
	c.Abort()
}
