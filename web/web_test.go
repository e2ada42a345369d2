package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// fakeAdmin records calls and returns a configured error.
type fakeAdmin struct {
	err   error
	calls []string
}

func (f *fakeAdmin) CreateStorageCluster(_ context.Context, c models.StorageCluster) (models.StorageCluster, error) {
	f.calls = append(f.calls, "cluster:"+c.Name)
	return c, f.err
}
func (f *fakeAdmin) DeleteStorageCluster(context.Context, string) error { return f.err }
func (f *fakeAdmin) CreateDatabase(_ context.Context, d models.Database) (models.Database, error) {
	f.calls = append(f.calls, "db:"+d.Name)
	return d, f.err
}
func (f *fakeAdmin) UpdateStorageCluster(_ context.Context, name string, p models.StorageClusterPatch) (models.StorageCluster, error) {
	return models.StorageCluster{Name: name, FailureDomain: *p.FailureDomain}, f.err
}
func (f *fakeAdmin) UpdateDatabase(_ context.Context, _ string, _ models.DatabasePatch) (models.Database, error) {
	return models.Database{}, f.err
}
func (f *fakeAdmin) DeleteDatabase(context.Context, string) error { return f.err }
func (f *fakeAdmin) SetDrain(context.Context, string, bool) error { return f.err }
func (f *fakeAdmin) Rebalance(context.Context, bool) (models.PlanView, error) {
	return models.PlanView{}, f.err
}
func (f *fakeAdmin) TransferLeader(context.Context, string, int, models.LeaderTransfer) error {
	return f.err
}

func newState(t testing.TB) func() *statemachine.State {
	m := statemachine.New(statemachine.Config{})
	m.Push(statemachine.Event{Source: statemachine.SourceMaster, Kind: statemachine.KindMaster, Type: kv.WatchPut,
		Value: models.MasterRecord{NodeID: "m1", Address: "127.0.0.1:1", Term: 5}})
	m.Push(statemachine.Event{Source: statemachine.SourceMaster, Type: kv.WatchSynced})
	m.Push(statemachine.Event{Source: statemachine.SourceDatabaseConfig, Type: kv.WatchSynced})
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	require.Eventually(t, func() bool { return m.Snapshot().Synced[statemachine.SourceDatabaseConfig] }, 10*time.Second, time.Millisecond)
	return m.Snapshot
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr ...string) (int, map[string]any) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what API clients send
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out map[string]any
	if w.Body.Len() > 0 {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), w.Body.String())
	}
	return w.Code, out
}

func TestStatusEndpoints(t *testing.T) {
	h := web.New(web.Config{NodeID: "n1", Roles: []string{"broker"}, State: newState(t), Health: testHealth{down: true}}).Handler()
	code, body := do(t, h, "GET", "/api/v1/health", "")
	require.Equal(t, 200, code)
	require.Equal(t, "n1", body["node_id"])
	code, body = do(t, h, "GET", "/api/v1/ready", "")
	require.Equal(t, 200, code)
	require.Equal(t, "down", body["etcd"])
	code, body = do(t, h, "GET", "/api/v1/master", "")
	require.Equal(t, 200, code)
	require.Equal(t, "m1", body["node_id"])
	require.EqualValues(t, 5, body["term"])
	code, body = do(t, h, "GET", "/api/v1/explore?role=chef", "")
	require.Equal(t, 400, code)
	require.Contains(t, body["error"].(map[string]any)["message"], "chef")
	code, _ = do(t, h, "GET", "/api/v1/explore?role=storage", "")
	require.Equal(t, 200, code)
	code, body = do(t, h, "GET", "/api/v1/nope", "")
	require.Equal(t, 404, code)
	require.Equal(t, "not_found", body["error"].(map[string]any)["code"])
}

// TestUnknownInternalEndpoint: a peer of another version asking for an
// internal endpoint this node does not serve gets 404 unknown_endpoint (its
// client then takes the older way), whatever the method, never the
// console's page or its 405.
func TestUnknownInternalEndpoint(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	})
	h := web.New(web.Config{NodeID: "n1", Roles: []string{"storage"}, State: newState(t), Console: console}).Handler()
	for _, method := range []string{"GET", "POST"} {
		code, body := do(t, h, method, "/internal/v1/fetch-next", "")
		require.Equal(t, 404, code, method)
		require.Equal(t, "unknown_endpoint", body["error"].(map[string]any)["code"], method)
		require.Contains(t, body["error"].(map[string]any)["message"], fmt.Sprintf("protocol %d", models.ProtocolVersion))
	}
	code, _ := do(t, h, "DELETE", "/internal/v1/history", "")
	require.Equal(t, 404, code, "a known internal path with an unknown method")
}

func TestErrorMappingAndStrictBodies(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: x", models.ErrBadInput), 400, "bad_request"},
		{fmt.Errorf("%w: x", models.ErrNotFound), 404, "not_found"},
		{fmt.Errorf("%w: x", models.ErrConflict), 409, "conflict"},
		{fmt.Errorf("%w: x", models.ErrImpossible), 422, "unprocessable"},
		{fmt.Errorf("%w: x", models.ErrUnavailable), 503, "unavailable"},
		{fmt.Errorf("%w: x", models.ErrNoSpace), 503, "etcd_nospace"},
		// An unknown outcome also matches ErrUnavailable; the precise code wins.
		{fmt.Errorf("%w: %w", models.ErrOutcomeUnknown, models.ErrUnavailable), 503, "outcome_unknown"},
		{errors.New("boom"), 500, "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			a := &fakeAdmin{err: tc.err}
			h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: a}}).Handler()
			code, body := do(t, h, "POST", "/api/v1/databases", `{"name":"db","num_shards":1}`)
			require.Equal(t, tc.status, code)
			require.Equal(t, tc.code, body["error"].(map[string]any)["code"])
		})
	}
	a := &fakeAdmin{}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: a}}).Handler()
	for _, body := range []string{`{"name":"db","bogus":1}`, `{"name":`, `{"name":"a"}{"name":"b"}`, `[]`} {
		code, out := do(t, h, "POST", "/api/v1/databases", body)
		require.Equal(t, 400, code, body)
		require.Equal(t, "bad_request", out["error"].(map[string]any)["code"])
	}
	require.Empty(t, a.calls, "refused bodies never reach the admin service")
	code, _ := do(t, h, "POST", "/api/v1/rebalance?dry_run=maybe", "")
	require.Equal(t, 400, code)
}

func TestAdminToken(t *testing.T) {
	a := &fakeAdmin{}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: a}, Tokens: web.Tokens{Admin: "s3cret"}}).Handler()
	code, body := do(t, h, "POST", "/api/v1/storage-clusters", `{"name":"c1"}`)
	require.Equal(t, 401, code)
	require.Equal(t, "unauthorized", body["error"].(map[string]any)["code"])
	code, _ = do(t, h, "POST", "/api/v1/storage-clusters", `{"name":"c1"}`, "Authorization", "Bearer wrong")
	require.Equal(t, 401, code)
	require.Empty(t, a.calls)
	code, _ = do(t, h, "POST", "/api/v1/storage-clusters", `{"name":"c1"}`, "Authorization", "Bearer s3cret")
	require.Equal(t, 201, code)
	require.Equal(t, []string{"cluster:c1"}, a.calls)
	code, _ = do(t, h, "GET", "/api/v1/storage-clusters", "")
	require.Equal(t, 200, code, "reads need no token")
}

func TestBodyLimit(t *testing.T) {
	a := &fakeAdmin{}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: a}, MaxBodyBytes: 64}).Handler()
	code, body := do(t, h, "POST", "/api/v1/databases", `{"name":"`+strings.Repeat("a", 100)+`"}`)
	require.Equal(t, 400, code)
	require.Contains(t, body["error"].(map[string]any)["message"], "larger than")
	require.Empty(t, a.calls)
}

// fakeData accepts writes and counts them.
type fakeData struct{ writes int }

func (f *fakeData) Route(string, string) (models.RouteView, error) {
	return models.RouteView{}, nil
}
func (f *fakeData) Write(context.Context, string, string, []byte) error {
	f.writes++
	return nil
}
func (f *fakeData) Query(context.Context, models.Query) (json.RawMessage, error) {
	return json.RawMessage(`{"series":[]}`), nil
}

// TestWriteBodyLimit: write bodies have their own limit, answered with 413
// naming it; other bodies keep theirs.
func TestWriteBodyLimit(t *testing.T) {
	d := &fakeData{}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}, data: d}, MaxBodyBytes: 1 << 20, WriteMaxBodyBytes: 64}).Handler()
	code, body := do(t, h, "POST", "/api/v1/write?db=x", strings.Repeat("m value=1 1\n", 10))
	require.Equal(t, 413, code)
	require.Equal(t, "too_large", body["error"].(map[string]any)["code"])
	require.Contains(t, body["error"].(map[string]any)["message"], "--write-max-body-bytes")
	require.Equal(t, 0, d.writes)
	code, _ = do(t, h, "POST", "/api/v1/write?db=x", "m value=1 1\n")
	require.Equal(t, 204, code)
	require.Equal(t, 1, d.writes)
	code, _ = do(t, h, "POST", "/api/v1/databases", `{"name":"`+strings.Repeat("a", 30)+`","num_shards":1}`)
	require.Equal(t, 201, code, "the admin body limit is not the write one")
}

// TestProblemsAndDownNodes drives the real state manager: a storage node's
// record vanishes while an assignment still names it; /problems and /nodes
// report it down with its shards, and it clears when the node registers again.
func TestProblemsAndDownNodes(t *testing.T) {
	m := statemachine.New(statemachine.Config{})
	node := func(typ kv.WatchEventKind, id string) statemachine.Event {
		ev := statemachine.Event{Source: statemachine.ClusterNodesSource("c"), Kind: statemachine.KindStorageNodes, Cluster: "c", Type: typ, Name: id}
		if typ == kv.WatchPut {
			ev.Value = models.StorageNode{NodeID: id, NodeAddress: "h:" + id}
		}
		return ev
	}
	m.Push(statemachine.Event{Source: statemachine.SourceMaster, Kind: statemachine.KindMaster, Type: kv.WatchPut, Value: models.MasterRecord{NodeID: "m1"}})
	m.Push(statemachine.Event{Source: statemachine.SourceMaster, Type: kv.WatchSynced})
	m.Push(statemachine.Event{Source: "storage_config", Kind: statemachine.KindStorageConfig, Type: kv.WatchPut, Name: "c", Value: models.StorageCluster{Name: "c"}})
	m.Push(statemachine.Event{Source: "databases", Kind: statemachine.KindDatabaseConfig, Type: kv.WatchPut, Name: "db",
		Value: models.Database{Name: "db", StorageCluster: "c", NumShards: 2, ReplicaFactor: 2}})
	m.Push(statemachine.Event{Source: "assign", Kind: statemachine.KindAssign, Type: kv.WatchPut, Name: "db",
		Value: models.Assignment{DB: "db", Cluster: "c", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b"}}, {ID: 1, Replicas: []string{"b", "a"}}}}})
	m.Push(statemachine.Event{Source: "shard_state", Kind: statemachine.KindShardState, Type: kv.WatchPut, Name: "db",
		Value: models.ShardStates{DB: "db", Shards: []models.ShardState{{ID: 0, Leader: "a", Term: 1, Status: "online"}, {ID: 1, Leader: "b", Term: 1, Status: "offline"}}}})
	m.Push(node(kv.WatchPut, "a"))
	m.Push(node(kv.WatchPut, "b"))
	m.Push(node(kv.WatchDelete, "b"))
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	require.Eventually(t, func() bool { return len(m.Snapshot().Departed["c"]) > 0 }, 10*time.Second, time.Millisecond)
	h := web.New(web.Config{State: m.Snapshot, Health: testHealth{alarms: []string{"NOSPACE"}}}).Handler()

	code, body := do(t, h, "GET", "/api/v1/problems", "")
	require.Equal(t, 200, code)
	var kinds []string
	for _, p := range body["problems"].([]any) {
		pm := p.(map[string]any)
		node, _ := pm["node"].(string)
		db, _ := pm["db"].(string)
		kinds = append(kinds, pm["kind"].(string)+":"+node+db)
		require.NotEmpty(t, pm["message"])
		require.NotEmpty(t, pm["link"])
	}
	require.Equal(t, []string{"etcd_alarm:", "node_down:b", "shards_offline:db", "under_replicated:db"}, kinds)
	require.EqualValues(t, 3, body["counts"].(map[string]any)["critical"])

	code, body = do(t, h, "GET", "/api/v1/nodes", "")
	require.Equal(t, 200, code)
	down := body["down"].([]any)
	require.Len(t, down, 1)
	d := down[0].(map[string]any)
	require.Equal(t, "b", d["node_id"])
	require.Equal(t, "h:b", d["node_address"], "the last known record")
	require.Positive(t, d["since"])
	require.EqualValues(t, 2, d["replicas"])
	require.Equal(t, []any{"db/0", "db/1"}, d["shards"])
	live := body["storage"].(map[string]any)["c"].([]any)
	require.Len(t, live, 1)
	require.EqualValues(t, 2, live[0].(map[string]any)["replicas"])
	require.EqualValues(t, 1, live[0].(map[string]any)["leads"])

	seq := m.Snapshot().Seq
	m.Push(node(kv.WatchPut, "b"))
	require.Eventually(t, func() bool { return m.Snapshot().Seq != seq }, 10*time.Second, time.Millisecond)
	_, body = do(t, h, "GET", "/api/v1/nodes", "")
	require.Empty(t, body["down"])
	_, body = do(t, h, "GET", "/api/v1/problems", "")
	for _, p := range body["problems"].([]any) {
		require.NotEqual(t, "node_down", p.(map[string]any)["kind"])
	}
}

// TestAPIDocumented: every public route is in docs/api.md with its method.
func TestAPIDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	text := string(doc)
	s := web.New(web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}}})
	n := 0
	for _, route := range s.Routes() {
		method, path := route.Method, ginPathToDoc(route.Path)
		r := method + " " + path
		if strings.HasPrefix(path, "/debug/") {
			continue
		}
		n++
		require.Regexp(t, "`"+method+`(/[A-Z]+)* `+regexp.QuoteMeta(path)+"[`\\[?]", text, "route %s is not documented", r)
	}
	require.Greater(t, n, 20)
}

// ginPathToDoc writes gin's :param and *param path segments as {param}, as
// docs/api.md does.
func ginPathToDoc(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// TestInfluxProbes: /health and /ready answer in InfluxDB 2.x's shapes,
// pass and ready once the node is, fail and 503 naming why before.
func TestInfluxProbes(t *testing.T) {
	waiting := "storage: shards opening"
	h := web.New(web.Config{NodeID: "n1", State: newState(t), Health: testHealth{waiting: func() string { return waiting }}}).Handler()
	code, body := do(t, h, "GET", "/health", "")
	require.Equal(t, 503, code)
	require.Equal(t, "fail", body["status"])
	require.Contains(t, body["message"], waiting)
	code, body = do(t, h, "GET", "/ready", "")
	require.Equal(t, 503, code)
	require.Equal(t, "not ready", body["status"])
	waiting = ""
	code, body = do(t, h, "GET", "/health", "")
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"name": "influxdb", "message": "ready for queries and writes", "status": "pass",
		"checks": []any{}, "version": "1.8.10", "commit": ""}, body)
	code, body = do(t, h, "GET", "/ready", "")
	require.Equal(t, 200, code)
	require.Equal(t, "ready", body["status"])
	require.NotEmpty(t, body["started"])
	require.NotEmpty(t, body["up"])
}
