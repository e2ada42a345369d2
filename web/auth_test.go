package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

type scopeData struct{}

func (scopeData) Route(string, string) (models.RouteView, error)      { return models.RouteView{}, nil }
func (scopeData) Write(context.Context, string, string, []byte) error { return nil }
func (scopeData) Query(context.Context, models.Query) (json.RawMessage, error) {
	return json.RawMessage(`{"series":[]}`), nil
}

// routeScopes is the scope of every public route; 0 means open. The table
// test below fails for a route missing here, so a new route must pick one.
var routeScopes = map[string]web.Scope{
	"GET /api/v1/health":                             0,
	"GET /api/v1/ready":                              0,
	"GET /api/v1/master":                             web.ScopeRead,
	"GET /api/v1/nodes":                              web.ScopeRead,
	"GET /api/v1/explore":                            web.ScopeRead,
	"GET /api/v1/history":                            web.ScopeRead,
	"GET /api/v1/problems":                           web.ScopeRead,
	"GET /internal/v1/history":                       0, // guarded by the cluster secret, not a token
	"POST /write":                                    web.ScopeWrite,
	"POST /api/v2/write":                             web.ScopeWrite,
	"GET /query":                                     web.ScopeRead,
	"POST /query":                                    web.ScopeRead,
	"GET /ping":                                      0, // InfluxDB clients ping before they authenticate
	"GET /health":                                    0, // InfluxDB 2.x's probes, open like /api/v1/health
	"GET /ready":                                     0,
	"POST /api/v2/query":                             web.ScopeRead,
	"HEAD /ping":                                     0,
	"GET /api/v1/storage-clusters":                   web.ScopeRead,
	"GET /api/v1/storage-clusters/:name":             web.ScopeRead,
	"GET /api/v1/databases":                          web.ScopeRead,
	"GET /api/v1/databases/:name":                    web.ScopeRead,
	"GET /api/v1/databases/:name/shards":             web.ScopeRead,
	"GET /api/v1/route":                              web.ScopeRead,
	"GET /api/v1/query":                              web.ScopeRead,
	"GET /metrics":                                   web.ScopeRead,
	"POST /api/v1/write":                             web.ScopeWrite,
	"POST /api/v1/storage-clusters":                  web.ScopeAdmin,
	"DELETE /api/v1/storage-clusters/:name":          web.ScopeAdmin,
	"PATCH /api/v1/storage-clusters/:name":           web.ScopeAdmin,
	"POST /api/v1/databases":                         web.ScopeAdmin,
	"PATCH /api/v1/databases/:name":                  web.ScopeAdmin,
	"DELETE /api/v1/databases/:name":                 web.ScopeAdmin,
	"POST /api/v1/nodes/:id/drain":                   web.ScopeAdmin,
	"POST /api/v1/nodes/:id/undrain":                 web.ScopeAdmin,
	"POST /api/v1/databases/:name/shards/:id/leader": web.ScopeAdmin,
	"POST /api/v1/rebalance":                         web.ScopeAdmin,
	"GET /api/v1/operators":                          web.ScopeRead,
	"GET /debug/pprof/*name":                         web.ScopeAdmin,
	"POST /debug/pprof/symbol":                       web.ScopeAdmin,
}

var routeBodies = map[string]string{
	"POST /api/v1/storage-clusters":                  `{"name":"c1"}`,
	"POST /api/v1/databases":                         `{"name":"db","num_shards":1,"replica_factor":1}`,
	"PATCH /api/v1/databases/:name":                  `{"num_shards":2}`,
	"PATCH /api/v1/storage-clusters/:name":           `{"failure_domain":"zone"}`,
	"POST /api/v1/databases/:name/shards/:id/leader": `{"node_id":"n1"}`,
	"POST /api/v1/write":                             "m v=1 1",
}

func concretePath(p string) string {
	r := strings.NewReplacer(":name", "db", ":id", "0", "*name", "cmdline")
	out := r.Replace(p)
	switch out {
	case "/api/v1/query":
		out += "?db=db&metric=m&start=0&end=1"
	case "/api/v1/route":
		out += "?db=db&series=m"
	case "/api/v1/explore":
		out += "?role=broker"
	}
	return out
}

// TestRouteScopes: every route x every credential (none, read, write,
// admin token) with all three tokens set: open routes always pass, guarded
// ones answer 401 without a token, 403 with a narrower one, and reach the
// handler (2xx) with the right or a wider one.
func TestRouteScopes(t *testing.T) {
	tokens := web.Tokens{Admin: "adm", Write: "wri", Read: "rea"}
	srv := web.New(web.Config{State: stateWithDB(t), Broker: testBroker{admin: &fakeAdmin{}, data: scopeData{}, influx: scopeInflux{}}, Tokens: tokens, History: scopeHistory{},
		Master: testMaster{ops: func(context.Context) (models.OperatorList, error) { return models.OperatorList{}, nil }}})
	h := srv.Handler()
	creds := []struct {
		name  string
		token string
		scope web.Scope
	}{{"none", "", 0}, {"read", "rea", web.ScopeRead}, {"write", "wri", web.ScopeWrite}, {"admin", "adm", web.ScopeAdmin}}
	seen := 0
	for _, r := range srv.Routes() {
		key := r.Method + " " + r.Path
		want, ok := routeScopes[key]
		require.True(t, ok, "route %s has no scope in the table", key)
		seen++
		for _, c := range creds {
			t.Run(key+"/"+c.name, func(t *testing.T) {
				req := httptest.NewRequest(r.Method, concretePath(r.Path), strings.NewReader(routeBodies[key]))
				if routeBodies[key] != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if c.token != "" {
					req.Header.Set("Authorization", "Bearer "+c.token)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				switch {
				case want == 0 || c.scope >= want:
					require.True(t, w.Code >= 200 && w.Code < 300, "want 2xx, got %d: %s", w.Code, w.Body.String())
				case c.scope == 0:
					require.Equal(t, http.StatusUnauthorized, w.Code, w.Body.String())
					require.Equal(t, `Bearer realm="cairn"`, w.Header().Get("WWW-Authenticate"))
				default:
					require.Equal(t, http.StatusForbidden, w.Code, w.Body.String())
				}
				require.NotContains(t, w.Body.String(), "adm\"")
			})
		}
	}
	require.Equal(t, len(routeScopes), seen, "a route of the table is no longer registered")
}

// stateWithDB holds storage cluster "db" and database "db".
func stateWithDB(t *testing.T) func() *statemachine.State {
	m := statemachine.New(statemachine.Config{})
	for _, e := range []statemachine.Event{
		{Source: statemachine.SourceStorageConfig, Kind: statemachine.KindStorageConfig, Type: kv.WatchPut, Name: "db", Value: models.StorageCluster{Name: "db"}},
		{Source: statemachine.SourceDatabaseConfig, Kind: statemachine.KindDatabaseConfig, Type: kv.WatchPut, Name: "db", Value: models.Database{Name: "db", StorageCluster: "db", NumShards: 1, ReplicaFactor: 1}},
		{Source: statemachine.SourceMaster, Kind: statemachine.KindMaster, Type: kv.WatchPut,
			Value: models.MasterRecord{NodeID: "m1", Address: "127.0.0.1:1", Term: 5}},
		{Source: statemachine.SourceMaster, Type: kv.WatchSynced},
		{Source: statemachine.SourceStorageConfig, Type: kv.WatchSynced},
		{Source: statemachine.SourceDatabaseConfig, Type: kv.WatchSynced},
	} {
		m.Push(e)
	}
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	require.Eventually(t, func() bool {
		return m.Snapshot().Databases.At("db").Name != "" && m.Snapshot().Synced[statemachine.SourceDatabaseConfig]
	}, 10*time.Second, time.Millisecond)
	return m.Snapshot
}

// TestTokensAllow: which scopes are open with which tokens set, and every
// credential form InfluxDB clients use.
func TestTokensAllow(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:wri"))
	cases := []struct {
		name   string
		tokens web.Tokens
		scope  web.Scope
		header string
		query  string
		status int // 0: allowed
	}{
		{"nothing set: admin open", web.Tokens{}, web.ScopeAdmin, "", "", 0},
		{"nothing set: write open", web.Tokens{}, web.ScopeWrite, "", "", 0},
		{"admin only: reads stay open", web.Tokens{Admin: "adm"}, web.ScopeRead, "", "", 0},
		{"admin only: writes need it (as before)", web.Tokens{Admin: "adm"}, web.ScopeWrite, "", "", 401},
		{"admin only: admin token writes", web.Tokens{Admin: "adm"}, web.ScopeWrite, "Bearer adm", "", 0},
		{"write only: admin open", web.Tokens{Write: "wri"}, web.ScopeAdmin, "", "", 0},
		{"write only: writes need it", web.Tokens{Write: "wri"}, web.ScopeWrite, "", "", 401},
		{"read only: writes open", web.Tokens{Read: "rea"}, web.ScopeWrite, "", "", 0},
		{"read only: reads need it", web.Tokens{Read: "rea"}, web.ScopeRead, "", "", 401},
		{"Token scheme", web.Tokens{Write: "wri"}, web.ScopeWrite, "Token wri", "", 0},
		{"token scheme, any case", web.Tokens{Write: "wri"}, web.ScopeWrite, "token wri", "", 0},
		{"basic password", web.Tokens{Write: "wri"}, web.ScopeWrite, basic, "", 0},
		{"p parameter", web.Tokens{Write: "wri"}, web.ScopeWrite, "", "?u=x&p=wri", 0},
		{"wrong p", web.Tokens{Write: "wri"}, web.ScopeWrite, "", "?p=nope", 401},
		{"write token on admin", web.Tokens{Admin: "adm", Write: "wri"}, web.ScopeAdmin, "Token wri", "", 403},
		{"read token on write", web.Tokens{Write: "wri", Read: "rea"}, web.ScopeWrite, "Bearer rea", "", 403},
		{"write token reads", web.Tokens{Write: "wri", Read: "rea"}, web.ScopeRead, "Bearer wri", "", 0},
		{"unknown scheme", web.Tokens{Write: "wri"}, web.ScopeWrite, "Digest wri", "", 401},
		{"prefix of a token", web.Tokens{Write: "wri"}, web.ScopeWrite, "Bearer wr", "", 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/write"+tc.query, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			err := tc.tokens.Allow(req, tc.scope)
			switch tc.status {
			case 0:
				require.NoError(t, err)
			case 401:
				require.Error(t, err)
				require.NotErrorIs(t, err, web.ErrForbidden)
			case 403:
				require.ErrorIs(t, err, web.ErrForbidden)
			}
		})
	}
}

// TestInternalGuard: every path under /internal/ (known or not) is refused
// with 401 and the cause before the route runs; other paths are untouched.
func TestInternalGuard(t *testing.T) {
	reached := false
	srv := web.New(web.Config{State: newState(t),
		InternalGuard: peerauth.NewVerifier(peerauth.VerifierConfig{Secret: "s3cret", Node: "n1"}).VerifyRequest,
		Storage: testStorage{routes: func(r gin.IRouter) {
			r.POST("/internal/v1/shards/:db/:shard/write", func(c *gin.Context) { reached = true; c.Status(204) })
		}}})
	h := srv.Handler()
	for _, p := range []string{"/internal/v1/shards/db/0/write", "/internal/v1/nope"} {
		code, body := do(t, h, "POST", p, "points")
		require.Equal(t, 401, code, p)
		require.Equal(t, "unauthorized", body["error"].(map[string]any)["code"])
	}
	require.False(t, reached)
	req := httptest.NewRequest("POST", "/internal/v1/shards/db/0/write", strings.NewReader("points"))
	peerauth.SignRequest(peerauth.Key("s3cret"), req, peerauth.V3, "n1", []byte("points"), time.Now())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, 204, w.Code)
	require.True(t, reached)
	code, _ := do(t, h, "GET", "/api/v1/health", "")
	require.Equal(t, 200, code)
}

// TestPprofCmdline: the profiler needs the admin token and shows the
// command line it is given (the redacted one), not os.Args.
func TestPprofCmdline(t *testing.T) {
	srv := web.New(web.Config{State: newState(t), Tokens: web.Tokens{Admin: "adm"},
		Cmdline: []string{"cairn", "--admin-token", "<redacted>"}})
	h := srv.Handler()
	req := httptest.NewRequest("GET", "/debug/pprof/cmdline", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, 401, w.Code)
	req.Header.Set("Authorization", "Bearer adm")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, 200, w.Code)
	require.Equal(t, "cairn\x00--admin-token\x00<redacted>", w.Body.String())
	req = httptest.NewRequest("GET", "/debug/pprof/", nil)
	req.Header.Set("Authorization", "Bearer adm")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), "goroutine")
}

// scopeHistory is a web.History with nothing sampled.
type scopeHistory struct{}

func (scopeHistory) Node() models.HistorySeries { return models.HistorySeries{} }
func (scopeHistory) Cluster(context.Context) models.HistoryCluster {
	return models.HistoryCluster{}
}

// scopeInflux mounts the InfluxDB endpoints' paths on the groups web hands
// it, with handlers that only answer 204: what is tested is the scope each
// group carries.
type scopeInflux struct{}

func (scopeInflux) Refuse(c *gin.Context, status int, err error) {
	c.AbortWithStatusJSON(status, gin.H{"error": err.Error()})
}

func (scopeInflux) Routes(writes, queries, open gin.IRouter) {
	ok := func(c *gin.Context) { c.Status(http.StatusNoContent) }
	writes.POST("/write", ok)
	writes.POST("/api/v2/write", ok)
	queries.GET("/query", ok)
	queries.POST("/query", ok)
	queries.POST("/api/v2/query", ok)
	open.GET("/ping", ok)
	open.HEAD("/ping", ok)
}
