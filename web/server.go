// Package web is Cairn's HTTP surface: the REST admin API under /api/v1, the
// data plane (write, query, route), /metrics and the web console, on one gin
// engine. Handlers read the node's local state snapshot and delegate changes
// to the services passed in; errors become the JSON envelope in errors.go.
package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config of the HTTP server.
type Config struct {
	Addr     string
	NodeID   string
	Roles    []string
	Tokens   Tokens
	Logger   *zap.Logger
	Gatherer prometheus.Gatherer
	// TLS, when set, serves HTTPS.
	TLS *tls.Config
	// InternalGuard, when set, runs before any route under /internal/
	// (even an unknown one): an error refuses the request with 401 and the
	// peerauth cause in X-Cairn-Auth-Error.
	InternalGuard func(*http.Request) error
	// Cmdline is what /debug/pprof/cmdline shows: the command line with
	// secret values redacted. Only the program name when nil.
	Cmdline []string
	// State returns the node's current snapshot.
	State func() *statemachine.State
	// Health reports the node's links (etcd) and what its roles wait for;
	// nil: etcd up, nothing to wait for.
	Health ClusterHealth
	// Master is the node's view of the master; nil: never master, no
	// operators list.
	Master MasterView
	// Broker is the broker role (admin API, data plane, Influx); nil on
	// nodes without it.
	Broker BrokerAPI
	// Storage is the storage role (replication endpoints, write fence);
	// nil on nodes without it.
	Storage StorageAPI
	// Console serves the web console for paths outside the API; may be nil.
	Console http.Handler
	// MaxBodyBytes caps request bodies; default 32 MiB.
	MaxBodyBytes int64
	// WriteMaxBodyBytes caps write bodies instead; default MaxBodyBytes.
	WriteMaxBodyBytes int64
	// WriteMaxInflightBytes bounds the write body bytes in flight at once
	// (0: no bound); a write past it waits up to WriteInflightWait
	// (default 5s), then gets 503.
	WriteMaxInflightBytes int64
	WriteInflightWait     time.Duration
	// WriteBodyTimeout is how long a write request may take to send its
	// body (0: only the server's read timeout): a slow sender loses its
	// request, not the fast ones their slots.
	WriteBodyTimeout time.Duration
	// History serves GET /api/v1/history; nil answers 404.
	History History
}

// InfluxRoutes mounts InfluxDB's endpoints: writes, reads and open probes on
// separate groups, so each group carries its own authorization scope.
type InfluxRoutes interface {
	Routes(writes, queries, open gin.IRouter)
	// Refuse answers a refused request (401 or 403) in the shape the
	// endpoint's clients expect.
	Refuse(c *gin.Context, status int, err error)
}

// Server is the running HTTP server.
type Server struct {
	cfg Config
	// admin and data are the broker role's (nil without it).
	admin Admin
	data  Data
	srv   *http.Server
	ln    net.Listener
	lg    *zap.Logger
	gin   *gin.Engine
	done  chan error
	// refusals rate-limits the log lines of refused internal requests.
	refusals *peerauth.Limiter
	writes   *inflight // nil: no bound on write bodies in flight
	started  time.Time // when New ran: /ready's "started" and "up"
}

func init() { gin.SetMode(gin.ReleaseMode) }

// New builds the routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.WriteMaxBodyBytes == 0 {
		cfg.WriteMaxBodyBytes = cfg.MaxBodyBytes
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Health == nil {
		cfg.Health = noHealth{}
	}
	if cfg.Master == nil {
		cfg.Master = noMaster{}
	}
	s := &Server{cfg: cfg, lg: cfg.Logger.Named("http"), done: make(chan error, 1), refusals: peerauth.NewLimiter(time.Minute, nil), started: time.Now()}
	var influx InfluxRoutes
	if cfg.Broker != nil {
		s.admin, s.data, influx = cfg.Broker.Admin(), cfg.Broker.Data(), cfg.Broker.Influx()
	}
	if cfg.WriteMaxInflightBytes > 0 {
		s.writes = newInflight(cfg.WriteMaxInflightBytes)
		if s.cfg.WriteInflightWait <= 0 {
			s.cfg.WriteInflightWait = 5 * time.Second
		}
	}
	e := gin.New()
	e.ContextWithFallback = true
	e.Use(s.recover, securityHeaders, s.logRequests, refuseCrossSite, s.limitBody, s.guardInternal)
	e.HandleMethodNotAllowed = true
	api := e.Group("/api/v1")
	// Probes stay open: they reveal nothing but liveness.
	api.GET("/health", s.health)
	api.GET("/ready", s.ready)
	e.GET("/health", s.influxHealth)
	e.GET("/ready", s.influxReady)
	api.GET("/master", s.RequireScope(ScopeRead), s.master)
	api.GET("/nodes", s.RequireScope(ScopeRead), s.nodes)
	api.GET("/problems", s.RequireScope(ScopeRead), s.problems)
	api.GET("/explore", s.RequireScope(ScopeRead), s.explore)
	api.GET("/history", s.RequireScope(ScopeRead), s.history)
	api.GET("/operators", s.RequireScope(ScopeRead), s.operators)
	// A peer's own samples, for the fan-out of GET /api/v1/history: an
	// internal route, so the cluster secret (not a user token) guards it.
	e.GET("/internal/v1/history", s.historyNode)
	s.adminRoutes(api)
	if cfg.Storage != nil && cfg.Storage.FaultInjection() {
		api.POST("/debug/faults", s.RequireScope(ScopeAdmin), s.injectFault)
	}
	if influx != nil {
		// InfluxDB clients send tokens as `Token x`, basic auth or p=, which
		// RequireScope accepts; /ping stays open, as clients ping before
		// they authenticate. A refusal answers in InfluxDB's error shape,
		// which its clients parse and show.
		influx.Routes(e.Group("/", RequireScopeAs(cfg.Tokens, ScopeWrite, influx.Refuse)),
			e.Group("/", RequireScopeAs(cfg.Tokens, ScopeRead, influx.Refuse)), e.Group("/"))
	}
	if cfg.Storage != nil {
		cfg.Storage.Routes(e)
	}
	e.GET("/metrics", s.RequireScope(ScopeRead), gin.WrapH(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	// Go's profiler, for operators chasing CPU or memory: admin only, since
	// profiles and the command line tell a lot about a node.
	e.GET("/debug/pprof/*name", s.RequireScope(ScopeAdmin), s.pprof)
	e.POST("/debug/pprof/symbol", s.RequireScope(ScopeAdmin), gin.WrapF(pprof.Symbol))
	e.NoRoute(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/internal/") {
			// A peer of another version: it must learn that this node does
			// not speak the endpoint (and take the older way), not get the
			// console's page or a 405 from it.
			fail(c, fmt.Errorf("%w: %s %s (this node speaks protocol %d)", models.ErrUnknownEndpoint, c.Request.Method, c.Request.URL.Path, models.ProtocolVersion))
			return
		}
		if strings.HasPrefix(c.Request.URL.Path, "/api/") || s.cfg.Console == nil {
			fail(c, fmt.Errorf("%w: no route %s %s", models.ErrNotFound, c.Request.Method, c.Request.URL.Path))
			return
		}
		s.cfg.Console.ServeHTTP(c.Writer, c.Request)
	})
	e.NoMethod(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/internal/") {
			fail(c, fmt.Errorf("%w: %s %s (this node speaks protocol %d)", models.ErrUnknownEndpoint, c.Request.Method, c.Request.URL.Path, models.ProtocolVersion))
			return
		}
		c.AbortWithStatusJSON(http.StatusMethodNotAllowed, models.ErrorBody{Error: models.ErrorDetail{Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s not allowed on %s", c.Request.Method, c.Request.URL.Path)}})
	})
	s.gin = e
	return s
}

// Handler exposes the routes (tests).
func (s *Server) Handler() http.Handler { return s.gin }

// Routes lists the registered routes (tests check each has a scope).
func (s *Server) Routes() gin.RoutesInfo { return s.gin.Routes() }

// Listen binds the address, so the caller knows the port before serving.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.gin,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          newServerErrorLog(s.lg),
	}
	go func() {
		var err error
		if s.cfg.TLS != nil {
			s.srv.TLSConfig = s.cfg.TLS
			err = s.srv.ServeTLS(ln, "", "")
		} else {
			err = s.srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Done reports the server's end.
func (s *Server) Done() <-chan error { return s.done }

// Shutdown stops accepting and waits for requests in flight, up to ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

func (s *Server) recover(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.lg.Error("handler panic", zap.Any("panic", r), zap.String("path", c.Request.URL.Path))
			fail(c, fmt.Errorf("internal error"))
		}
	}()
	c.Next()
}

func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	lvl := zap.DebugLevel
	if c.Writer.Status() >= 500 && !expectedRefusal(c) {
		lvl = zap.WarnLevel
	}
	if ce := s.lg.Check(lvl, "request"); ce != nil {
		ce.Write(zap.String("method", c.Request.Method), zap.String("path", c.Request.URL.Path),
			zap.Int("status", c.Writer.Status()), zap.Duration("took", time.Since(start)))
	}
}

func (s *Server) limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		if p := c.FullPath(); p == writePath || p == "/write" || p == "/api/v2/write" {
			c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.WriteMaxBodyBytes)
			defer s.meterWrite(c.Writer, c.Request, s.cfg.WriteMaxBodyBytes)()
		} else {
			c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBodyBytes)
		}
	}
	c.Next()
}

// guardInternal refuses requests to /internal/ that fail the internal
// guard (cluster secret proof, client certificate), before routing: an
// unknown internal path is refused like a known one.
func (s *Server) guardInternal(c *gin.Context) {
	if s.cfg.InternalGuard == nil || !strings.HasPrefix(c.Request.URL.Path, "/internal/") {
		c.Next()
		return
	}
	if err := s.cfg.InternalGuard(c.Request); err != nil {
		cause := peerauth.Cause(err)
		if cause == "" {
			cause = "error"
		}
		host, _, _ := net.SplitHostPort(c.Request.RemoteAddr)
		if s.refusals.Allow(host + " " + cause) {
			s.lg.Warn("refused an internal request (rate limited: one line per peer and cause a minute)",
				zap.String("remote", c.Request.RemoteAddr), zap.String("path", c.Request.URL.Path), zap.String("cause", cause), zap.Error(err))
		}
		c.Header(peerauth.HeaderError, cause)
		fail(c, fmt.Errorf("%w: %w", models.ErrUnauthorized, err))
		return
	}
	c.Next()
}

// pprof serves Go's profiler; cmdline shows the redacted command line.
func (s *Server) pprof(c *gin.Context) {
	switch strings.TrimPrefix(c.Param("name"), "/") {
	case "cmdline":
		args := s.cfg.Cmdline
		if args == nil {
			args = os.Args[:1]
		}
		c.Header("X-Content-Type-Options", "nosniff")
		c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte(strings.Join(args, "\x00")))
	case "profile":
		pprof.Profile(c.Writer, c.Request)
	case "symbol":
		pprof.Symbol(c.Writer, c.Request)
	case "trace":
		pprof.Trace(c.Writer, c.Request)
	default:
		pprof.Index(c.Writer, c.Request)
	}
}
