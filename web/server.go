// Package web is Cairn's HTTP surface: the REST admin API under /api/v1, the
// data plane (write, query, route), /metrics and the web console, on one gin
// engine. Handlers read the node's local state snapshot and delegate changes
// to the services passed in; errors become the JSON envelope in errors.go.
package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"strings"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config of the HTTP server.
type Config struct {
	Addr       string
	NodeID     string
	Roles      []string
	AdminToken string
	Logger     *zap.Logger
	Gatherer   prometheus.Gatherer
	// State returns the node's current snapshot.
	State func() *statemachine.State
	// EtcdUp reports whether etcd answered recently.
	EtcdUp func() bool
	// IsMaster reports whether this node currently holds a master term.
	IsMaster func() bool
	// Admin handles metadata changes; nil on nodes without the broker role.
	Admin Admin
	// Data handles writes and queries; nil until the data path exists.
	Data Data
	// Console serves the web console for paths outside the API; may be nil.
	Console http.Handler
	// Mount adds routes outside the public API (the storage node's
	// replication endpoints).
	Mount func(gin.IRouter)
	// MaxBodyBytes caps request bodies; default 32 MiB.
	MaxBodyBytes int64
	// Influx mounts the InfluxDB-compatible endpoints (/write, /api/v2/write,
	// /query, /ping); nil on nodes without the broker role.
	Influx InfluxRoutes
}

// InfluxRoutes mounts InfluxDB's endpoints: writes and reads on separate
// groups, so each group carries its own authorization scope.
type InfluxRoutes interface {
	Routes(writes, queries gin.IRouter)
}

// Server is the running HTTP server.
type Server struct {
	cfg  Config
	srv  *http.Server
	ln   net.Listener
	lg   *zap.Logger
	gin  *gin.Engine
	done chan error
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
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	s := &Server{cfg: cfg, lg: cfg.Logger.Named("http"), done: make(chan error, 1)}
	e := gin.New()
	e.ContextWithFallback = true
	e.Use(s.recover, s.logRequests, s.limitBody)
	e.HandleMethodNotAllowed = true
	api := e.Group("/api/v1")
	api.GET("/health", s.health)
	api.GET("/ready", s.ready)
	api.GET("/master", s.master)
	api.GET("/nodes", s.nodes)
	api.GET("/explore", s.explore)
	s.adminRoutes(api)
	if cfg.Influx != nil {
		// The two groups are where write and read scopes attach.
		influxWrites, influxQueries := e.Group("/"), e.Group("/")
		cfg.Influx.Routes(influxWrites, influxQueries)
	}
	if cfg.Mount != nil {
		cfg.Mount(e)
	}
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	// Go's profiler, for operators chasing CPU or memory.
	e.GET("/debug/pprof/*any", gin.WrapH(http.DefaultServeMux))
	e.NoRoute(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/api/") || s.cfg.Console == nil {
			fail(c, fmt.Errorf("%w: no route %s %s", models.ErrNotFound, c.Request.Method, c.Request.URL.Path))
			return
		}
		s.cfg.Console.ServeHTTP(c.Writer, c.Request)
	})
	e.NoMethod(func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusMethodNotAllowed, errorBody{Error: errorDetail{Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s not allowed on %s", c.Request.Method, c.Request.URL.Path)}})
	})
	s.gin = e
	return s
}

// Handler exposes the routes (tests).
func (s *Server) Handler() http.Handler { return s.gin }

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
	}
	go func() {
		err := s.srv.Serve(ln)
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
	if c.Writer.Status() >= 500 {
		lvl = zap.WarnLevel
	}
	if ce := s.lg.Check(lvl, "request"); ce != nil {
		ce.Write(zap.String("method", c.Request.Method), zap.String("path", c.Request.URL.Path),
			zap.Int("status", c.Writer.Status()), zap.Duration("took", time.Since(start)))
	}
}

func (s *Server) limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBodyBytes)
	}
	c.Next()
}

// requireAdmin guards mutating endpoints when an admin token is configured.
func (s *Server) requireAdmin(c *gin.Context) {
	if s.cfg.AdminToken == "" {
		c.Next()
		return
	}
	scheme, got, _ := strings.Cut(c.GetHeader("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AdminToken)) != 1 {
		fail(c, fmt.Errorf("%w: this endpoint needs the admin token (Authorization: Bearer <token>)", models.ErrUnauthorized))
		return
	}
	c.Next()
}
