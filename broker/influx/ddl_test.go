package influx

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// memAdmin keeps databases in a map, as etcd would behind meta.Admin; its
// backend reads the same map.
type memAdmin struct {
	fakeBackend
	dbs     map[string]models.Database
	creates int
}

func (m *memAdmin) CreateDatabase(_ context.Context, d models.Database) (models.Database, error) {
	if _, ok := m.dbs[d.Name]; ok {
		return d, fmt.Errorf("%w: database %q", models.ErrConflict, d.Name)
	}
	m.creates++
	m.dbs[d.Name] = d
	return d, nil
}

func (m *memAdmin) UpdateDatabase(_ context.Context, name string, p models.DatabasePatch) (models.Database, error) {
	d, ok := m.dbs[name]
	if !ok {
		return d, fmt.Errorf("%w: database %q", models.ErrNotFound, name)
	}
	d.ApplyLifecycle(p)
	if p.ReplicaFactor != nil {
		d.ReplicaFactor = *p.ReplicaFactor
	}
	m.dbs[name] = d
	return d, nil
}

func (m *memAdmin) DeleteDatabase(_ context.Context, name string) error {
	if _, ok := m.dbs[name]; !ok {
		return fmt.Errorf("%w: database %q", models.ErrNotFound, name)
	}
	delete(m.dbs, name)
	return nil
}

func (m *memAdmin) Database(db string) (models.Database, error) {
	d, ok := m.dbs[db]
	if !ok {
		return d, fmt.Errorf("%w: database %q", models.ErrNotFound, db)
	}
	return d, nil
}

func (m *memAdmin) Databases() []string {
	var out []string
	for n := range m.dbs {
		out = append(out, n)
	}
	return out
}

// TestDDL: InfluxQL's database statements change the databases through
// Admin with the node's defaults, and SHOW RETENTION POLICIES shows the
// database's real options, with InfluxDB 1.x's answers (checked against
// influxd 1.6.7) for the existing-database and missing-policy cases.
func TestDDL(t *testing.T) {
	m := &memAdmin{dbs: map[string]models.Database{}}
	e := gin.New()
	New(Config{Backend: m, Admin: m, Defaults: Defaults{Shards: 2, ReplicaFactor: 1, StorageCluster: "c1"}}).
		Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	q := func(stmt string) string {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("POST", "/query?q="+url.QueryEscape(stmt), nil))
		require.Equal(t, 200, w.Code, "%s: %s", stmt, w.Body)
		return w.Body.String()
	}
	ok := `{"results":[{"statement_id":0}]}`
	failed := func(msg string) string { return `{"results":[{"statement_id":0,"error":"` + msg + `"}]}` }
	rps := func(rows string) string {
		return `{"results":[{"statement_id":0,"series":[{"columns":["name","duration","shardGroupDuration","replicaN","default"],"values":[` + rows + `]}]}]}`
	}

	require.JSONEq(t, ok, q(`CREATE DATABASE "telegraf"`))
	require.Equal(t, models.Database{Name: "telegraf", StorageCluster: "c1", NumShards: 2, ReplicaFactor: 1}, m.dbs["telegraf"])
	require.JSONEq(t, ok, q(`CREATE DATABASE telegraf`), "an existing database succeeds")
	require.JSONEq(t, ok, q(`CREATE DATABASE telegraf WITH DURATION INF`), "its policy, said again")
	require.JSONEq(t, failed("retention policy conflicts with an existing policy"), q(`CREATE DATABASE telegraf WITH DURATION 3h`))
	require.Equal(t, 1, m.creates)
	require.JSONEq(t, rps(`["autogen","0s","168h0m0s",1,true]`), q(`SHOW RETENTION POLICIES ON telegraf`))

	require.JSONEq(t, ok, q(`CREATE DATABASE w WITH DURATION 2h REPLICATION 3 SHARD DURATION 30m NAME short`))
	require.Equal(t, models.Database{Name: "w", StorageCluster: "c1", NumShards: 2, ReplicaFactor: 3,
		Retention: models.Duration(2 * 3600e9), Partition: models.Duration(30 * 60e9), Policy: "short"}, m.dbs["w"])
	require.JSONEq(t, rps(`["short","2h0m0s","30m0s",3,true]`), q(`SHOW RETENTION POLICIES ON w`))
	require.JSONEq(t, ok, q(`ALTER RETENTION POLICY short ON w DURATION 4h REPLICATION 2`))
	require.JSONEq(t, rps(`["short","4h0m0s","30m0s",2,true]`), q(`SHOW RETENTION POLICIES ON w`))
	require.JSONEq(t, failed("retention policy not found: autogen"), q(`ALTER RETENTION POLICY autogen ON w DURATION 1h`))
	require.JSONEq(t, failed("database not found: nope"), q(`ALTER RETENTION POLICY autogen ON nope DURATION 1h`))
	require.Contains(t, q(`ALTER RETENTION POLICY short ON w DURATION 1500ms`), "want whole seconds")

	// One policy per database: a second one replaces it only as DEFAULT.
	require.Contains(t, q(`CREATE RETENTION POLICY one_month ON telegraf DURATION 30d REPLICATION 1`), "add DEFAULT")
	require.JSONEq(t, ok, q(`CREATE RETENTION POLICY one_month ON telegraf DURATION 30d REPLICATION 1 DEFAULT`))
	require.JSONEq(t, rps(`["one_month","720h0m0s","24h0m0s",1,true]`), q(`SHOW RETENTION POLICIES ON telegraf`))
	require.JSONEq(t, ok, q(`CREATE RETENTION POLICY one_month ON telegraf DURATION 30d REPLICATION 1`), "the same policy again")
	require.JSONEq(t, failed("retention policy already exists"), q(`CREATE RETENTION POLICY one_month ON telegraf DURATION 7d REPLICATION 1`))

	// Rollup levels follow the raw policy, each with its own duration.
	rolled := m.dbs["w"]
	rolled.Rollups = []models.Rollup{{Interval: models.Duration(5 * 60e9), Retention: 30 * models.Duration(models.Day)}, {Interval: models.Duration(3600e9)}}
	m.dbs["w"] = rolled
	require.JSONEq(t, rps(`["short","4h0m0s","30m0s",2,true],["rollup_5m","720h0m0s","30m0s",2,false],["rollup_1h","0s","30m0s",2,false]`), q(`SHOW RETENTION POLICIES ON w`))

	require.JSONEq(t, `{"results":[{"statement_id":0,"series":[{"name":"databases","columns":["name"],"values":[["telegraf"],["w"]]}]}]}`, q(`SHOW DATABASES`))
	require.JSONEq(t, ok, q(`DROP DATABASE w`))
	require.NotContains(t, m.dbs, "w")
	require.JSONEq(t, ok, q(`DROP DATABASE w`), "dropping a missing database succeeds, as in InfluxDB")
	require.JSONEq(t, failed("database not found: w"), q(`SHOW RETENTION POLICIES ON w`))
}

// staleView is a broker's local state that still shows databases etcd
// (memAdmin) dropped a moment ago.
type staleView struct {
	*memAdmin
	stale map[string]models.Database
}

func (s staleView) Database(db string) (models.Database, error) {
	if d, ok := s.stale[db]; ok {
		return d, nil
	}
	return s.memAdmin.Database(db)
}

// TestCreateDatabaseAfterDropSeenLate: DROP DATABASE then CREATE DATABASE
// before the local state saw the drop creates the database again instead of
// answering from the dropped one.
func TestCreateDatabaseAfterDropSeenLate(t *testing.T) {
	m := &memAdmin{dbs: map[string]models.Database{}}
	v := staleView{memAdmin: m, stale: map[string]models.Database{"x": {Name: "x", StorageCluster: "c", NumShards: 1, ReplicaFactor: 1}}}
	e := gin.New()
	New(Config{Backend: v, Admin: m, Defaults: Defaults{Shards: 1, ReplicaFactor: 1, StorageCluster: "c"}}).
		Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("POST", "/query?q="+url.QueryEscape("CREATE DATABASE x"), nil))
	require.Equal(t, 200, w.Code, "%s", w.Body)
	require.JSONEq(t, `{"results":[{"statement_id":0}]}`, w.Body.String())
	require.Equal(t, 1, m.creates, "answered from the dropped database")
	require.Contains(t, m.dbs, "x")
}

// TestDDLScope: statements that change metadata ask Authorize for the
// admin scope before any statement runs; reads do not ask.
func TestDDLScope(t *testing.T) {
	m := &memAdmin{dbs: map[string]models.Database{"db": {Name: "db", NumShards: 1, ReplicaFactor: 1}}}
	var asked []bool
	refuse := true
	e := gin.New()
	New(Config{Backend: m, Admin: m, Defaults: Defaults{Shards: 1, ReplicaFactor: 1, StorageCluster: "c"},
		Authorize: func(_ *http.Request, admin bool) error {
			asked = append(asked, admin)
			if refuse {
				return fmt.Errorf("%w: this statement needs an admin token", models.ErrUnauthorized)
			}
			return nil
		}}).Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	do := func(stmt string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/query?db=db", strings.NewReader("q="+url.QueryEscape(stmt)))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		e.ServeHTTP(w, r)
		return w
	}
	require.Equal(t, 200, do(`SHOW DATABASES; SHOW RETENTION POLICIES`).Code)
	require.Empty(t, asked)
	w := do(`SHOW DATABASES; CREATE DATABASE x`)
	require.Equal(t, 401, w.Code)
	require.JSONEq(t, `{"error":"unauthorized: this statement needs an admin token"}`, w.Body.String())
	require.Equal(t, []bool{true}, asked)
	require.NotContains(t, m.dbs, "x", "nothing ran")
	refuse = false
	require.Equal(t, 200, do(`CREATE DATABASE x`).Code)
	require.Contains(t, m.dbs, "x")
}
