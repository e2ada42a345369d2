package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker/influx"
	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/cairn-db/cairn/web"
	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	influxhttp "github.com/influxdata/influxdb-client-go/v2/api/http"
	influx1 "github.com/influxdata/influxdb1-client/v2"
	"github.com/stretchr/testify/require"
)

// influxBackend accepts every write and knows database "db" only.
type influxBackend struct{ writes, deletes int }

func (b *influxBackend) Delete(context.Context, string, *wire.Delete) error { b.deletes++; return nil }

func (b *influxBackend) Write(context.Context, string, string, []byte) error { b.writes++; return nil }
func (b *influxBackend) Databases() []string                                 { return []string{"db"} }
func (b *influxBackend) Database(name string) (models.Database, error) {
	if name != "db" {
		return models.Database{}, models.ErrNotFound
	}
	return models.Database{Name: "db", NumShards: 1, ReplicaFactor: 1}, nil
}
func (b *influxBackend) AwaitDatabase(context.Context, string) error { return nil }
func (b *influxBackend) Select(context.Context, string, *query.ShardRequest) ([]*query.ShardResult, error) {
	return nil, nil
}
func (b *influxBackend) SeriesKeys(context.Context, string, string) (models.SeriesList, error) {
	return models.SeriesList{}, nil
}

// TestInfluxRefusalShape: the InfluxDB endpoints refuse a missing, wrong or
// too narrow token in InfluxDB's error shape, so stock clients surface the
// reason: {"error"} on /write and /query (influxdb1-client), {"code",
// "message"} on /api/v2/write (influxdb-client-go). Nothing is written.
func TestInfluxRefusalShape(t *testing.T) {
	be := &influxBackend{}
	srv := web.New(web.Config{State: stateWithDB(t), Broker: testBroker{admin: &fakeAdmin{}, data: scopeData{}, influx: influx.New(influx.Config{Backend: be})},
		History: scopeHistory{}, Tokens: web.Tokens{Admin: "adm", Write: "wri", Read: "rea"}})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	// Raw HTTP: the exact bodies.
	for _, tc := range []struct {
		method, path, auth string
		status             int
		v2                 bool
	}{
		{"POST", "/write?db=db", "", 401, false},
		{"POST", "/write?db=db&u=x&p=nope", "", 401, false},
		{"POST", "/write?db=db", "Token rea", 403, false},
		{"GET", "/query?db=db&q=SHOW+DATABASES", "", 401, false},
		{"POST", "/api/v2/write?bucket=db", "Token nope", 401, true},
		{"POST", "/api/v2/write?bucket=db", "Token rea", 403, true},
	} {
		req, err := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		require.NoError(t, err)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, "%s %s: %s", tc.method, tc.path, raw)
		var body map[string]string
		require.NoError(t, json.Unmarshal(raw, &body), "%s %s: a flat JSON object of strings: %s", tc.method, tc.path, raw)
		if tc.v2 {
			want := map[int]string{401: "unauthorized", 403: "forbidden"}[tc.status]
			require.Equal(t, want, body["code"], "%s", raw)
			require.NotEmpty(t, body["message"])
			require.Len(t, body, 2)
		} else {
			require.NotEmpty(t, body["error"], "%s", raw)
			require.Len(t, body, 1)
		}
	}

	// influxdb1-client: a wrong password surfaces the reason on write and query.
	c1, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: hs.URL, Username: "alice", Password: "wrong"})
	require.NoError(t, err)
	defer c1.Close()
	bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "db"})
	require.NoError(t, err)
	pt, err := influx1.NewPoint("cpu", nil, map[string]any{"v": 1.0}, time.Unix(1, 0))
	require.NoError(t, err)
	bp.AddPoint(pt)
	err = c1.Write(bp)
	require.ErrorContains(t, err, "the token is not valid on this node")
	resp, err := c1.Query(influx1.NewQuery("SHOW DATABASES", "db", ""))
	require.NoError(t, err, "the client decodes the refusal")
	require.ErrorContains(t, resp.Error(), "the token is not valid on this node")
	// The read token queries but cannot write.
	c1r, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: hs.URL, Username: "alice", Password: "rea"})
	require.NoError(t, err)
	defer c1r.Close()
	resp, err = c1r.Query(influx1.NewQuery("SHOW DATABASES", "db", ""))
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	require.ErrorContains(t, c1r.Write(bp), "a read token cannot call this endpoint")

	// influxdb-client-go: the typed error carries InfluxDB's code.
	for token, want := range map[string]struct {
		status int
		code   string
	}{"wrong": {401, "unauthorized"}, "rea": {403, "forbidden"}} {
		c2 := influxdb2.NewClientWithOptions(hs.URL, token, influxdb2.DefaultOptions().SetMaxRetries(0))
		err := c2.WriteAPIBlocking("org", "db").WriteRecord(context.Background(), "cpu v=1 1")
		c2.Close()
		var herr *influxhttp.Error
		require.True(t, errors.As(err, &herr), "%v", err)
		require.Equal(t, want.status, herr.StatusCode)
		require.Equal(t, want.code, herr.Code)
		require.NotEmpty(t, herr.Message)
	}
	require.Zero(t, be.writes, "no refused write reached the backend")
}

// TestInfluxDDLNeedsAdmin: /query is open to the read scope, but CREATE
// DATABASE through it needs the admin token (Tokens.AllowStatement, as the
// app wires it): without a token, or with a narrower one, it is refused in
// InfluxDB's shape and nothing is created; reads stay open when no read
// token is set.
func TestInfluxDDLNeedsAdmin(t *testing.T) {
	for _, tokens := range []web.Tokens{{Admin: "adm"}, {Admin: "adm", Write: "wri", Read: "rea"}} {
		admin, be := &fakeAdmin{}, &influxBackend{}
		srv := web.New(web.Config{State: stateWithDB(t), History: scopeHistory{}, Tokens: tokens,
			Broker: testBroker{admin: admin, data: scopeData{}, influx: influx.New(influx.Config{Backend: be, Admin: admin,
				Authorize: tokens.AllowStatement, Defaults: influx.Defaults{Shards: 1, ReplicaFactor: 1, StorageCluster: "db"}})}})
		hs := httptest.NewServer(srv.Handler())
		query := func(token, q string) (int, string) {
			req, err := http.NewRequest("POST", hs.URL+"/query?q="+url.QueryEscape(q), nil)
			require.NoError(t, err)
			if token != "" {
				req.SetBasicAuth("telegraf", token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(raw)
		}
		code, body := query("", "CREATE DATABASE telegraf")
		require.Equal(t, 401, code, body)
		require.Contains(t, body, `"error":"unauthorized: `)
		for _, narrow := range []string{tokens.Read, tokens.Write} {
			if narrow != "" {
				code, body = query(narrow, "CREATE DATABASE telegraf")
				require.Equal(t, 403, code, body)
				require.Contains(t, body, "it needs a admin token")
			}
		}
		require.Empty(t, admin.calls, "nothing created")
		if tokens.Read == "" {
			code, _ = query("", "SHOW DATABASES")
			require.Equal(t, 200, code)
		}
		code, body = query("adm", "CREATE DATABASE telegraf")
		require.Equal(t, 200, code, body)
		require.JSONEq(t, `{"results":[{"statement_id":0}]}`, body)
		require.Equal(t, []string{"db:telegraf"}, admin.calls)

		// Every delete needs the admin scope too (InfluxDB asks only the
		// write privilege of DELETE and DROP SERIES).
		for _, q := range []string{"DELETE FROM cpu WHERE host = 'a'", "DROP SERIES FROM cpu WHERE host = 'a'", "DROP MEASUREMENT cpu"} {
			for _, narrow := range []string{"", tokens.Read, tokens.Write} {
				if code, body = query(narrow, q); narrow == "" {
					require.Equal(t, 401, code, body)
				} else {
					require.Equal(t, 403, code, body)
				}
			}
			require.Zero(t, be.deletes, "no refused delete reached the backend")
			req, err := http.NewRequest("POST", hs.URL+"/query?db=db&q="+url.QueryEscape(q), nil)
			require.NoError(t, err)
			req.SetBasicAuth("telegraf", "adm")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode, string(raw))
			require.JSONEq(t, `{"results":[{"statement_id":0}]}`, string(raw))
			require.Equal(t, 1, be.deletes, q)
			be.deletes = 0
		}
		hs.Close()
	}
}
