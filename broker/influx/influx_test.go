package influx

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

func gz(t *testing.T, s string) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func TestReadBody(t *testing.T) {
	req := func(body []byte, enc string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/write", bytes.NewReader(body))
		if enc != "" {
			r.Header.Set("Content-Encoding", enc)
		}
		return r
	}
	b, err := ReadBody(req(gz(t, "m v=1"), "gzip"), 100)
	require.NoError(t, err)
	require.Equal(t, "m v=1", string(b))
	b, err = ReadBody(req([]byte("m v=1"), ""), 5)
	require.NoError(t, err)
	require.Equal(t, "m v=1", string(b))
	_, err = ReadBody(req([]byte("m v=12"), ""), 5)
	require.ErrorIs(t, err, models.ErrTooLarge)
	// 1 MiB of zeros gzips to about 1 KiB: the limit is on what it expands to.
	_, err = ReadBody(req(gz(t, strings.Repeat("0", 1<<20)), "gzip"), 64<<10)
	require.ErrorIs(t, err, models.ErrTooLarge)
	_, err = ReadBody(req([]byte("plain"), "gzip"), 100)
	require.ErrorIs(t, err, ErrBadEncoding)
	_, err = ReadBody(req([]byte("x"), "br"), 100)
	require.ErrorIs(t, err, ErrBadEncoding)

	// The body is read into one buffer of the size it says it has: one
	// that says less still reads whole (or past the limit, refused), one
	// that says more reads what there is.
	lying := func(body string, length int64) *http.Request {
		r := req([]byte(body), "")
		r.ContentLength = length
		return r
	}
	b, err = ReadBody(lying("m v=1\nm v=2", 3), 100)
	require.NoError(t, err)
	require.Equal(t, "m v=1\nm v=2", string(b))
	_, err = ReadBody(lying("m v=1\nm v=2", 3), 8)
	require.ErrorIs(t, err, models.ErrTooLarge)
	b, err = ReadBody(lying("m v=1", 50), 100)
	require.NoError(t, err)
	require.Equal(t, "m v=1", string(b))
	b, err = ReadBody(lying("m v=1", 5), 100)
	require.NoError(t, err)
	require.Equal(t, "m v=1", string(b))
	require.Equal(t, 5+bytes.MinRead, cap(b), "one buffer of the said size")
	// A declared length buys at most maxUpfront before its bytes arrive:
	// a sender declaring 32 MiB and sending 5 bytes is not given 32 MiB.
	b, err = ReadBody(lying("m v=1", 32<<20), 64<<20)
	require.NoError(t, err)
	require.Equal(t, "m v=1", string(b))
	require.LessOrEqual(t, cap(b), maxUpfront+bytes.MinRead)
	big := strings.Repeat("m v=1\n", (3<<20)/6)
	b, err = ReadBody(lying(big, int64(len(big))), 64<<20)
	require.NoError(t, err)
	require.Equal(t, big, string(b), "a body past maxUpfront grows as it arrives")
}

// fakeBackend records writes and serves one database's series.
type fakeBackend struct {
	writes  []string
	deletes []wire.Delete
}

func (f *fakeBackend) Delete(_ context.Context, db string, d *wire.Delete) error {
	if db != "db" {
		return fmt.Errorf("%w: database %q", models.ErrNotFound, db)
	}
	f.deletes = append(f.deletes, *d)
	return nil
}

func (f *fakeBackend) Write(_ context.Context, db, precision string, body []byte) error {
	switch {
	case db != "db":
		return fmt.Errorf("%w: database %q", models.ErrNotFound, db)
	case strings.Contains(string(body), "partly"):
		return &models.PartialWriteError{Reason: "unable to parse 'partly': missing fields", Dropped: 1}
	case strings.Contains(string(body), "bad"):
		return fmt.Errorf("%w: line 2: bad", models.ErrBadInput)
	}
	f.writes = append(f.writes, precision+" "+string(body))
	return nil
}
func (f *fakeBackend) Databases() []string { return []string{"db"} }
func (f *fakeBackend) Database(db string) (models.Database, error) {
	if db != "db" {
		return models.Database{}, models.ErrNotFound
	}
	return models.Database{Name: "db", NumShards: 1, ReplicaFactor: 3}, nil
}
func (f *fakeBackend) AwaitDatabase(context.Context, string) error { return nil }
func (f *fakeBackend) Select(_ context.Context, db string, req *query.ShardRequest) ([]*query.ShardResult, error) {
	if db != "db" {
		return nil, models.ErrNotFound
	}
	return []*query.ShardResult{{Raw: []query.RawSeries{{Field: "v", TS: []int64{1_500_000_000_123_000_000}, Values: []float64{2.5}}}}}, nil
}
func (f *fakeBackend) SeriesKeys(context.Context, string, string) (models.SeriesList, error) {
	return models.SeriesList{Keys: []string{"m,host=a#v"}}, nil
}

func serve(t *testing.T, b Backend) http.Handler {
	e := gin.New()
	h := New(Config{Backend: b, Now: func() time.Time { return time.Unix(1_600_000_000, 0) }})
	h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	return e
}

func TestHandlers(t *testing.T) {
	fb := &fakeBackend{}
	srv := serve(t, fb)
	do := func(method, target string, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
		return w
	}
	require.Equal(t, 204, do("POST", "/write?db=db&precision=h", "m v=1 1").Code)
	require.Equal(t, 204, do("POST", "/api/v2/write?bucket=db/rp&precision=us", "m v=1 1").Code)
	require.Equal(t, []string{"h m v=1 1", "us m v=1 1"}, fb.writes)
	w := do("POST", "/write?db=db", "m v=1\nbad")
	require.Equal(t, 400, w.Code)
	require.JSONEq(t, `{"error":"unable to parse points: line 2: bad"}`, w.Body.String())
	// A partial write is InfluxDB's message as is, on both versions.
	w = do("POST", "/write?db=db", "m v=1\npartly")
	require.Equal(t, 400, w.Code)
	require.JSONEq(t, `{"error":"partial write: unable to parse 'partly': missing fields dropped=1"}`, w.Body.String())
	require.Equal(t, "partial write: unable to parse 'partly': missing fields dropped=1", w.Header().Get("X-Influxdb-Error"))
	w = do("POST", "/api/v2/write?bucket=db", "m v=1\npartly")
	require.Equal(t, 400, w.Code)
	require.JSONEq(t, `{"code":"invalid","message":"partial write: unable to parse 'partly': missing fields dropped=1"}`, w.Body.String())
	w = do("POST", "/api/v2/write?bucket=x", "m v=1")
	require.Equal(t, 404, w.Code)
	require.JSONEq(t, `{"code":"not found","message":"bucket \"x\" not found"}`, w.Body.String())
	require.Equal(t, 400, do("POST", "/api/v2/write?bucket=db&precision=h", "m v=1").Code, "v2 has no hours")
	require.Equal(t, 400, do("POST", "/write", "m v=1").Code)

	// Times as RFC 3339 without epoch, integers with it.
	w = do("GET", "/query?db=db&q="+url.QueryEscape("SELECT v FROM m; SHOW RETENTION POLICIES; SHOW DATABASES"), "")
	require.Equal(t, 200, w.Code)
	require.JSONEq(t, `{"results":[
		{"statement_id":0,"series":[{"name":"m","columns":["time","v"],"values":[["2017-07-14T02:40:00.123Z",2.5]]}]},
		{"statement_id":1,"series":[{"columns":["name","duration","shardGroupDuration","replicaN","default"],"values":[["autogen","0s","168h0m0s",3,true]]}]},
		{"statement_id":2,"series":[{"name":"databases","columns":["name"],"values":[["db"]]}]}]}`, w.Body.String())
	w = do("GET", "/query?db=db&epoch=s&q="+url.QueryEscape("SELECT v FROM m"), "")
	require.Contains(t, w.Body.String(), `[1500000000,2.5]`)
	w = do("GET", "/query?db=nope&q="+url.QueryEscape("SELECT v FROM m"), "")
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), `"error":"database not found: nope"`)
	w = do("GET", "/query?q="+url.QueryEscape("SHOW MEASUREMENTS"), "")
	require.Contains(t, w.Body.String(), `"error":"database name required"`)
	w = do("GET", "/query?q="+url.QueryEscape(`SHOW MEASUREMENTS ON "db"; SHOW RETENTION POLICIES ON "db"`), "")
	require.JSONEq(t, `{"results":[{"statement_id":0,"series":[{"name":"measurements","columns":["name"],"values":[["m"]]}]},
		{"statement_id":1,"series":[{"columns":["name","duration","shardGroupDuration","replicaN","default"],"values":[["autogen","0s","168h0m0s",3,true]]}]}]}`, w.Body.String())
	for target, want := range map[string]string{
		"/query?db=db":                          `missing required parameter`,
		"/query?db=db&epoch=x&q=SHOW+DATABASES": `invalid epoch`,
		"/query?db=db&q=SELECT+FROM":            `error parsing query`,
	} {
		w := do("GET", target, "")
		require.Equal(t, 400, w.Code, target)
		require.Contains(t, w.Body.String(), want, target)
	}
	// A statement Cairn cannot run gets its own error; the others run.
	w = do("GET", "/query?db=db&q="+url.QueryEscape("SHOW DATABASES; SHOW USERS; SELECT v INTO x FROM m; SHOW DATABASES"), "")
	require.Equal(t, 200, w.Code)
	require.JSONEq(t, `{"results":[{"statement_id":0,"series":[{"name":"databases","columns":["name"],"values":[["db"]]}]},
		{"statement_id":1,"error":"not supported by Cairn's InfluxQL: the statement SHOW USERS"},
		{"statement_id":2,"error":"not supported by Cairn's InfluxQL: SELECT ... INTO"},
		{"statement_id":3,"series":[{"name":"databases","columns":["name"],"values":[["db"]]}]}]}`, w.Body.String())
	// POST with the statement in a form body, as Grafana's POST mode sends it.
	r := httptest.NewRequest("POST", "/query", strings.NewReader("db=db&q="+url.QueryEscape("SHOW SERIES")))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w = httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	require.JSONEq(t, `{"results":[{"statement_id":0,"series":[{"columns":["key"],"values":[["m,host=a"]]}]}]}`, w.Body.String())
	require.Equal(t, 204, do("HEAD", "/ping", "").Code)
}

// rowsBackend answers every select with one raw series per host of n
// points, 10 s apart.
type rowsBackend struct {
	fakeBackend
	hosts []string
	n     int
}

func (b *rowsBackend) Select(context.Context, string, *query.ShardRequest) ([]*query.ShardResult, error) {
	res := &query.ShardResult{}
	for _, h := range b.hosts {
		s := query.RawSeries{Tags: []query.Tag{{Key: "host", Value: h}}, Field: "v"}
		for i := range b.n {
			s.TS = append(s.TS, int64(i)*10e9)
			s.Values = append(s.Values, float64(i))
		}
		res.Raw = append(res.Raw, s)
	}
	return []*query.ShardResult{res}, nil
}

// TestChunked: chunked=true streams InfluxDB's chunks — one object a line,
// at most chunk_size values of one series each, "partial" on a series
// continued in the next chunk and on a result until its last chunk, an
// error or an empty result in a chunk of its own.
func TestChunked(t *testing.T) {
	srv := serve(t, &rowsBackend{hosts: []string{"a", "b"}, n: 3})
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&epoch=s&chunked=true&chunk_size=2&q="+
		url.QueryEscape("SELECT v FROM m GROUP BY host; SHOW USERS; SHOW DATABASES"), nil))
	require.Equal(t, 200, w.Code)
	require.Empty(t, w.Header().Get("Content-Length"))
	require.Equal(t, `{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"host":"a"},"columns":["time","v"],"values":[[0,0],[10,1]],"partial":true}],"partial":true}]}
{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"host":"a"},"columns":["time","v"],"values":[[20,2]]}],"partial":true}]}
{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"host":"b"},"columns":["time","v"],"values":[[0,0],[10,1]],"partial":true}],"partial":true}]}
{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"host":"b"},"columns":["time","v"],"values":[[20,2]]}]}]}
{"results":[{"statement_id":1,"error":"not supported by Cairn's InfluxQL: the statement SHOW USERS"}]}
{"results":[{"statement_id":2,"series":[{"name":"databases","columns":["name"],"values":[["db"]]}]}]}
`, w.Body.String())

	// pretty=true indents as InfluxDB does (four spaces), chunked or not.
	w = httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&pretty=true&q=SHOW+DATABASES", nil))
	require.Equal(t, "{\n    \"results\": [\n        {\n            \"statement_id\": 0,\n            \"series\": [\n                {\n"+
		"                    \"name\": \"databases\",\n                    \"columns\": [\n                        \"name\"\n                    ],\n"+
		"                    \"values\": [\n                        [\n                            \"db\"\n                        ]\n                    ]\n"+
		"                }\n            ]\n        }\n    ]\n}\n", w.Body.String())
}
