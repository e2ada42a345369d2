package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	influx1 "github.com/influxdata/influxdb1-client/v2"
	"github.com/stretchr/testify/require"
)

// influxResponse is /query's answer, decoded with json.Number.
type influxResponse struct {
	Results []struct {
		StatementID int    `json:"statement_id"`
		Error       string `json:"error"`
		Series      []struct {
			Name    string            `json:"name"`
			Tags    map[string]string `json:"tags"`
			Columns []string          `json:"columns"`
			Values  [][]any           `json:"values"`
		} `json:"series"`
	} `json:"results"`
	Error string `json:"error"`
}

// influxQL runs q against /query (POST form, as Grafana's POST mode and the
// influx CLI send it) and decodes the answer.
func influxQL(t testing.TB, addr, db, q, epoch string) (int, influxResponse) {
	t.Helper()
	form := url.Values{"db": {db}, "q": {q}}
	if epoch != "" {
		form.Set("epoch", epoch)
	}
	resp, err := http.PostForm("http://"+addr+"/query", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out influxResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&out), "answer: %s", body)
	return resp.StatusCode, out
}

// startInfluxStandalone starts a standalone node and creates databases
// (name -> shards), waiting until writes to each succeed.
func startInfluxStandalone(t testing.TB, dbs map[string]int) *Proc {
	t.Helper()
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	for name, shards := range dbs {
		require.Eventually(t, func() bool {
			code, _ := p.post("/api/v1/databases", map[string]any{"name": name, "num_shards": shards, "replica_factor": 1})
			return code == 201 || code == 409
		}, 15*time.Second, 50*time.Millisecond)
		require.Eventually(t, func() bool {
			resp, err := http.Post("http://"+p.addr+"/write?db="+name, "text/plain", strings.NewReader("warmup value=1 1"))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusNoContent
		}, 20*time.Second, 50*time.Millisecond, "database %s never writable", name)
	}
	return p
}

// TestInfluxV1Client: the stock influxdb1-client pings, writes with every
// precision it offers (n, u, ms, s, m, h) and queries back through /query.
func TestInfluxV1Client(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"v1": 4})
	c, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: "http://" + p.addr, Username: "alice", Password: "ignored-without-tokens"})
	require.NoError(t, err)
	defer c.Close()

	_, version, err := c.Ping(5 * time.Second)
	require.NoError(t, err)
	require.NotEmpty(t, version)

	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	// One point per precision the client offers, each one hour apart, with a
	// sub-unit part the precision must drop: 12:00:00.123456789 + k hours.
	// The client validates precisions as Go duration units, so it cannot say
	// "u", and with "us" it writes nanosecond timestamps (its multiplier
	// table only knows "u"), which InfluxDB would refuse too: microseconds,
	// as n and u, are checked over raw HTTP in TestInfluxWriteEndpoints.
	precisions := []struct{ name string }{{"ns"}, {"ms"}, {"s"}, {"m"}, {"h"}}
	unit := map[string]time.Duration{"ns": 1, "ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour}
	for k, prec := range precisions {
		bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "v1", Precision: prec.name, RetentionPolicy: "autogen", WriteConsistency: "one"})
		require.NoError(t, err)
		ts := base.Add(time.Duration(k)*time.Hour + 123456789)
		pt, err := influx1.NewPoint("prec", map[string]string{"p": prec.name}, map[string]any{"value": float64(k + 1), "other": int64(k)}, ts)
		require.NoError(t, err)
		bp.AddPoint(pt)
		require.NoError(t, c.Write(bp), "precision %s", prec.name)
	}
	resp, err := c.Query(influx1.NewQuery(`SELECT "value", "other" FROM "prec" GROUP BY "p"`, "v1", "ns"))
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	require.Len(t, resp.Results, 1)
	got := map[string][]any{}
	for _, s := range resp.Results[0].Series {
		require.Equal(t, []string{"time", "value", "other"}, s.Columns)
		require.Len(t, s.Values, 1)
		got[s.Tags["p"]] = s.Values[0]
	}
	for k, prec := range precisions {
		row, ok := got[prec.name]
		require.True(t, ok, "no series for precision %s: %v", prec.name, got)
		want := base.Add(time.Duration(k) * time.Hour).Add(time.Duration(123456789)).Truncate(unit[prec.name])
		require.Equal(t, json.Number(fmt.Sprint(want.UnixNano())), row[0], "time written with precision %s", prec.name)
		require.Equal(t, json.Number(fmt.Sprint(k+1)), row[1])
		require.Equal(t, json.Number(fmt.Sprint(k)), row[2])
	}

	// An aggregate and a SHOW through the client, and the client sees
	// InfluxDB's errors as errors.
	resp, err = c.Query(influx1.NewQuery(`SELECT sum("value"), count("value") FROM "prec"; SHOW TAG VALUES FROM "prec" WITH KEY = "p"`, "v1", "s"))
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	require.Equal(t, json.Number("15"), resp.Results[0].Series[0].Values[0][1])
	require.Equal(t, json.Number("5"), resp.Results[0].Series[0].Values[0][2])
	require.Len(t, resp.Results[1].Series[0].Values, 5)
	resp, err = c.Query(influx1.NewQuery(`SELECT "value" INTO "copy" FROM "prec"`, "v1", ""))
	if err == nil {
		err = resp.Error()
	}
	require.ErrorContains(t, err, "SELECT ... INTO")
	bp, _ := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "missing"})
	pt, _ := influx1.NewPoint("m", nil, map[string]any{"v": 1.0}, base)
	bp.AddPoint(pt)
	require.ErrorContains(t, c.Write(bp), "database not found")
}

// TestInfluxV2Client: influxdb-client-go's blocking and batched write APIs,
// gzip on, with the bucket as the database ("db/rp" accepted).
func TestInfluxV2Client(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"v2": 4})
	opts := influxdb2.DefaultOptions().SetUseGZip(true).SetBatchSize(500).SetPrecision(time.Millisecond).SetFlushInterval(100)
	c := influxdb2.NewClientWithOptions("http://"+p.addr, "some-token", opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)

	blocking := c.WriteAPIBlocking("my-org", "v2/autogen")
	for i := range 100 {
		pt := influxdb2.NewPoint("blocking", map[string]string{"host": fmt.Sprintf("h%d", i%4)},
			map[string]any{"value": float64(i)}, base.Add(time.Duration(i)*time.Second))
		require.NoError(t, blocking.WritePoint(ctx, pt))
	}
	require.NoError(t, blocking.WriteRecord(ctx, "blocking,host=h9 value=1000 "+fmt.Sprint(base.Add(time.Hour).UnixMilli())))

	batched := c.WriteAPI("my-org", "v2")
	errs := batched.Errors()
	for i := range 2000 {
		batched.WritePoint(influxdb2.NewPoint("batched", map[string]string{"host": fmt.Sprintf("h%d", i%10)},
			map[string]any{"value": float64(i % 7), "n": i}, base.Add(time.Duration(i)*time.Millisecond)))
	}
	batched.Flush()
	select {
	case err := <-errs:
		t.Fatalf("batched write failed: %v", err)
	default:
	}

	code, res := influxQL(t, p.addr, "v2", `SELECT count("value"), sum("value") FROM "blocking"; SELECT count("value"), sum("value"), count("n") FROM "batched"; SHOW TAG VALUES FROM "batched" WITH KEY = "host"`, "ms")
	require.Equal(t, 200, code, "%+v", res)
	require.Equal(t, []any{json.Number("0"), json.Number("101"), json.Number("5950")}, res.Results[0].Series[0].Values[0])
	wantSum := 0
	for i := range 2000 {
		wantSum += i % 7
	}
	require.Equal(t, []any{json.Number("0"), json.Number("2000"), json.Number(fmt.Sprint(wantSum)), json.Number("2000")}, res.Results[1].Series[0].Values[0])
	require.Len(t, res.Results[2].Series[0].Values, 10)

	// A missing bucket is the client's error, named.
	err := c.WriteAPIBlocking("my-org", "nope").WriteRecord(ctx, "m v=1")
	require.ErrorContains(t, err, "not found")

	// The client's probes read InfluxDB 2.x's shapes; a Flux query is told
	// where InfluxQL is answered.
	health, err := c.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, "pass", string(health.Status))
	require.Equal(t, "influxdb", health.Name)
	ready, err := c.Ready(ctx)
	require.NoError(t, err)
	require.Equal(t, "ready", string(*ready.Status))
	require.NotNil(t, ready.Started)
	_, err = c.QueryAPI("my-org").Query(ctx, `from(bucket: "v2") |> range(start: -1h)`)
	require.ErrorContains(t, err, "use InfluxQL at /query")
	resp, err := http.Post("http://"+p.addr+"/api/v2/query", "application/json", strings.NewReader(`{"query":"from(bucket: \"v2\")"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotImplemented, resp.StatusCode)
}

// TestInfluxWriteEndpoints: the raw HTTP contract of the write endpoints
// (statuses, InfluxDB's error shapes, gzip with the limit on the
// decompressed size, the console's fallback not answering them).
func TestInfluxWriteEndpoints(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"w": 2})
	post := func(path string, body []byte, header map[string]string) (int, string, http.Header) {
		req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+path, bytes.NewReader(body))
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, _ := post("/write?db=w&precision=s&consistency=all&rp=autogen&u=a&p=b", []byte("m,host=a v=1 1700000000\nm,host=b v=2 1700000000"), nil)
	require.Equal(t, 204, code, body)
	code, body, _ = post("/write?db=w&precision=n", []byte("n v=1 1700000000000000001"), nil)
	require.Equal(t, 204, code, body)
	code, body, _ = post("/write?db=w&precision=u", []byte("n v=2 1700000000000001"), nil)
	require.Equal(t, 204, code, body)
	code, res := influxQL(t, p.addr, "w", "SELECT v FROM n", "ns")
	require.Equal(t, 200, code)
	require.Equal(t, [][]any{{json.Number("1700000000000000001"), json.Number("1")}, {json.Number("1700000000000001000"), json.Number("2")}}, res.Results[0].Series[0].Values)
	// A bad line is dropped and named, the others stored (TestPartialWrite).
	code, body, _ = post("/write?db=w", []byte("pw v=1\npw v=2\npw v=\n"), nil)
	require.Equal(t, 400, code)
	require.Contains(t, body, `"error":"partial write: unable to parse 'pw v=': `)
	require.Contains(t, body, ` dropped=1"`)
	code, body, _ = post("/write?db=nope", []byte("m v=1"), nil)
	require.Equal(t, 404, code)
	require.JSONEq(t, `{"error":"database not found: \"nope\""}`, body)
	code, body, _ = post("/write?db=w&precision=x", []byte("m v=1"), nil)
	require.Equal(t, 400, code, body)
	code, body, _ = post("/api/v2/write?bucket=w/autogen&org=o&precision=ms", []byte("m,host=c v=3 1700000000000"), map[string]string{"Authorization": "Token abc"})
	require.Equal(t, 204, code, body)
	code, body, _ = post("/api/v2/write?bucket=nope&org=o", []byte("m v=3"), nil)
	require.Equal(t, 404, code)
	require.Contains(t, body, `"code":"not found"`)

	// gzip on all three write endpoints.
	gz := func(s string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(s))
		require.NoError(t, zw.Close())
		return buf.Bytes()
	}
	hdr := map[string]string{"Content-Encoding": "gzip"}
	code, body, _ = post("/write?db=w&precision=s", gz("g,via=v1 v=1 1700000000"), hdr)
	require.Equal(t, 204, code, body)
	code, body, _ = post("/api/v2/write?bucket=w&precision=s", gz("g,via=v2 v=2 1700000000"), hdr)
	require.Equal(t, 204, code, body)
	code, body, _ = post("/api/v1/write?db=w&precision=s", gz("g,via=api v=3 1700000000"), hdr)
	require.Equal(t, 204, code, body)
	code, body, _ = post("/write?db=w", []byte("not gzip"), hdr)
	require.Equal(t, 400, code, body)
	// 40 MiB of line protocol compresses to well under the 32 MiB body
	// limit, which applies to the decompressed size.
	big := strings.Repeat("g,via=big v=1 1700000000\n", 40<<20/25)
	compressed := gz(big)
	require.Less(t, len(compressed), 1<<20)
	code, body, _ = post("/write?db=w&precision=s", compressed, hdr)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	code, body, _ = post("/api/v1/write?db=w&precision=s", compressed, hdr)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	require.Contains(t, body, "--write-max-body-bytes")

	code, res = influxQL(t, p.addr, "w", `SELECT sum(v) FROM g GROUP BY via; SELECT count(v) FROM m`, "s")
	require.Equal(t, 200, code)
	sums := map[string]any{}
	for _, s := range res.Results[0].Series {
		sums[s.Tags["via"]] = s.Values[0][1]
	}
	require.Equal(t, map[string]any{"v1": json.Number("1"), "v2": json.Number("2"), "api": json.Number("3")}, sums)
	require.Equal(t, json.Number("3"), res.Results[1].Series[0].Values[0][1])

	// /ping, GET and HEAD.
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(m, "http://"+p.addr+"/ping", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 204, resp.StatusCode)
		require.NotEmpty(t, resp.Header.Get("X-Influxdb-Version"))
	}
	// Query errors: a request that does not parse is 400; a statement Cairn
	// cannot run gets its own error beside the others' results; an unknown
	// database is the statement's error.
	code, res = influxQL(t, p.addr, "w", "SELECT v FROM m", "")
	require.Equal(t, 200, code)
	require.Len(t, res.Results[0].Series[0].Values, 3)
	code, res = influxQL(t, p.addr, "w", "SELEC v", "")
	require.Equal(t, 400, code)
	require.Contains(t, res.Error, "error parsing query")
	code, res = influxQL(t, p.addr, "w", `SELECT count(v) FROM m; SELECT mean(v) FROM m GROUP BY time(1m);
		SHOW USERS; SELECT v INTO n FROM m; SELECT count(v) FROM m`, "")
	require.Equal(t, 200, code)
	require.Len(t, res.Results, 5)
	for i, want := range []string{"", "lower limit", "SHOW USERS", "SELECT ... INTO", ""} {
		require.Equal(t, i, res.Results[i].StatementID)
		if want == "" {
			require.Empty(t, res.Results[i].Error)
			require.Equal(t, json.Number("3"), res.Results[i].Series[0].Values[0][1])
		} else {
			require.Contains(t, res.Results[i].Error, want)
		}
	}
	code, res = influxQL(t, p.addr, "nope", "SELECT v FROM m", "")
	require.Equal(t, 200, code)
	require.Equal(t, "database not found: nope", res.Results[0].Error)
}
