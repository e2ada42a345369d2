package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

// node serves one handler on a loopback port and returns its address.
func node(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// envelope answers err as a storage node does.
func envelope(w http.ResponseWriter, status int, err error) {
	_, body := models.Envelope(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func entry(t *testing.T, txn uint64, line string) wire.Entry {
	pts, err := lineproto.Parse([]byte(line), "ns", 0)
	require.NoError(t, err)
	return wire.Entry{TxnID: txn, Term: 2, Points: pts}
}

func encode(t *testing.T, e wire.Entry) []byte {
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	return b
}

// call is one client method against the node at addr, reduced to its error.
type call struct {
	name string
	run  func(c *client.Client, addr string) error
}

var shardAt = func(addr string) client.Shard {
	return client.Shard{Peer: client.Peer{ID: "n1", Address: addr}, DB: "db", Shard: 1}
}

// calls lists every method of the client.
var calls = []call{
	{"write", func(c *client.Client, a string) error { return c.Write(context.Background(), shardAt(a), 1, nil) }},
	{"log", func(c *client.Client, a string) error {
		ans, err := c.Log(context.Background(), shardAt(a), client.LogRequest{Term: 1, Node: "f"})
		if err == nil {
			ans.Close()
		}
		return err
	}},
	{"snapshot", func(c *client.Client, a string) error {
		rc, err := c.Snapshot(context.Background(), shardAt(a), 1)
		if err == nil {
			rc.Close()
		}
		return err
	}},
	{"leave", func(c *client.Client, a string) error { return c.Leave(context.Background(), shardAt(a), 1, "f") }},
	{"query", func(c *client.Client, a string) error {
		ans, err := c.Query(context.Background(), shardAt(a), client.QueryRequest{Metric: "cpu"})
		if err == nil {
			ans.Body.Close()
		}
		return err
	}},
	{"select", func(c *client.Client, a string) error {
		_, err := c.Select(context.Background(), shardAt(a), &query.ShardRequest{Measurement: "cpu"})
		return err
	}},
	{"series", func(c *client.Client, a string) error {
		_, err := c.Series(context.Background(), shardAt(a), "cpu", 0)
		return err
	}},
	{"txn", func(c *client.Client, a string) error {
		_, err := c.Txn(context.Background(), client.Peer{ID: "n1", Address: a}, "db", []int{1})
		return err
	}},
	{"fetch", func(c *client.Client, a string) error {
		ans, err := c.Fetch(context.Background(), client.Peer{ID: "n1", Address: a}, client.FetchRequest{Node: "f", Shards: []client.FetchShard{{DB: "db"}}})
		if err == nil {
			ans.Close()
		}
		return err
	}},
}

// TestRefusalsDecodeToSentinels: whatever the method, a node's refusal
// (status + code in the JSON envelope) comes back as a *PeerError with that
// status wrapping the sentinel the code names, and the node's message; a
// plain 404 (a node without the endpoint) is ErrUnsupported; not reaching
// the node is no PeerError at all.
func TestRefusalsDecodeToSentinels(t *testing.T) {
	refusals := []struct {
		status   int
		sentinel error
		err      error
	}{
		{http.StatusConflict, models.ErrStaleTerm, fmt.Errorf("%w: not leading db/1 at term 1", models.ErrStaleTerm)},
		{http.StatusNotFound, models.ErrNotHosted, fmt.Errorf("%w: db/1 on n1", models.ErrNotHosted)},
		{http.StatusServiceUnavailable, models.ErrNotEnoughISR, fmt.Errorf("%w: 1 in-sync, minimum 2", models.ErrNotEnoughISR)},
		{http.StatusServiceUnavailable, models.ErrAckTimeout, models.ErrAckTimeout},
		{http.StatusRequestEntityTooLarge, models.ErrTooLarge, fmt.Errorf("%w: over 10 series", models.ErrTooLarge)},
		{http.StatusBadRequest, models.ErrBadInput, fmt.Errorf("%w: bad shard id", models.ErrBadInput)},
		{http.StatusBadRequest, models.ErrBadQuery, fmt.Errorf("%w: unknown function", models.ErrBadQuery)},
		{http.StatusUnauthorized, models.ErrUnauthorized, fmt.Errorf("%w: bad peer signature", models.ErrUnauthorized)},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			cl := client.New(http.DefaultClient)
			for _, r := range refusals {
				addr := node(t, func(w http.ResponseWriter, _ *http.Request) { envelope(w, r.status, r.err) })
				err := c.run(cl, addr)
				var peer *client.PeerError
				require.ErrorAs(t, err, &peer, "%v", r.err)
				require.Equal(t, r.status, peer.Status)
				require.ErrorIs(t, err, r.sentinel, "%v", r.err)
				if r.sentinel != models.ErrNotEnoughISR {
					require.NotErrorIs(t, err, models.ErrNotEnoughISR, "a refusal names its own sentinel only")
				}
				require.Equal(t, r.err.Error(), err.Error())
				require.NotErrorIs(t, err, client.ErrUnsupported)
			}

			// Every way a node of another version refuses an endpoint it
			// does not serve: a plain 404, this version's unknown_endpoint,
			// an older console's 405 to a POST and its page (200) to a GET,
			// a 501.
			unknown := []http.HandlerFunc{
				http.NotFound,
				func(w http.ResponseWriter, r *http.Request) {
					status, body := models.Envelope(fmt.Errorf("%w: POST /internal/v1/x", models.ErrUnknownEndpoint))
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					_ = json.NewEncoder(w).Encode(body)
				},
				func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
				},
				func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "not implemented", http.StatusNotImplemented)
				},
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/html; charset=utf-8")
					_, _ = w.Write([]byte("<!doctype html><title>Cairn</title>"))
				},
			}
			for i, h := range unknown {
				err := c.run(cl, node(t, h))
				require.ErrorIs(t, err, client.ErrUnsupported, "refusal %d", i)
				require.NotErrorIs(t, err, models.ErrNotHosted, "refusal %d", i)
			}

			srv := httptest.NewServer(http.NotFoundHandler())
			gone := strings.TrimPrefix(srv.URL, "http://")
			srv.Close()
			err := c.run(cl, gone)
			require.Error(t, err)
			var peer *client.PeerError
			require.False(t, errors.As(err, &peer), "not reaching the node is no refusal")
		})
	}
}

func TestLogEntries(t *testing.T) {
	want := []wire.Entry{entry(t, 6, "cpu v=1 10"), entry(t, 7, "cpu v=2 20")}
	var got string
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery
		var buf []byte
		for _, e := range want {
			buf = client.AppendEntry(buf, encode(t, e))
		}
		_, _ = w.Write(buf)
	})
	ans, err := client.New(http.DefaultClient).Log(context.Background(), shardAt(addr),
		client.LogRequest{Term: 2, Node: "f1", After: 5, AfterTerm: 1})
	require.NoError(t, err)
	defer ans.Close()
	require.Equal(t, "GET /internal/v1/shards/db/1/log?after=5&after_term=1&node=f1&term=2&wait_ms=0", got)
	require.False(t, ans.Truncate)
	require.False(t, ans.FullSync)
	for _, w := range want {
		e, err := ans.Next()
		require.NoError(t, err)
		require.Equal(t, w, e)
	}
	_, err = ans.Next()
	require.ErrorIs(t, err, io.EOF)
}

func TestLogInstructions(t *testing.T) {
	cl := client.New(http.DefaultClient)
	addr := node(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(client.HeaderTruncateTo, "41")
		w.WriteHeader(http.StatusResetContent)
	})
	ans, err := cl.Log(context.Background(), shardAt(addr), client.LogRequest{Term: 1})
	require.NoError(t, err)
	require.True(t, ans.Truncate)
	require.EqualValues(t, 41, ans.TruncateTo)
	_, err = ans.Next()
	require.ErrorIs(t, err, io.EOF, "an instruction has no entries")

	addr = node(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
	ans, err = cl.Log(context.Background(), shardAt(addr), client.LogRequest{Term: 1})
	require.NoError(t, err)
	require.True(t, ans.FullSync)

	addr = node(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusResetContent) })
	_, err = cl.Log(context.Background(), shardAt(addr), client.LogRequest{Term: 1})
	require.ErrorIs(t, err, client.ErrBadAnswer, "a truncation without its txn id")

	addr = node(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(client.AppendEntry(nil, encode(t, entry(t, 1, "cpu v=1 1")))[:5]) // cut short
	})
	ans, err = cl.Log(context.Background(), shardAt(addr), client.LogRequest{Term: 1})
	require.NoError(t, err)
	defer ans.Close()
	_, err = ans.Next()
	require.ErrorIs(t, err, client.ErrBadAnswer)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "a cut answer is no clean end")
}

func TestSnapshotAndLeave(t *testing.T) {
	var got []string
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		if strings.HasSuffix(r.URL.Path, "/snapshot") {
			_, _ = w.Write([]byte("the whole replica"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	cl := client.New(http.DefaultClient)
	rc, err := cl.Snapshot(context.Background(), shardAt(addr), 4)
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "the whole replica", string(data))
	require.NoError(t, cl.Leave(context.Background(), shardAt(addr), 4, "n2"))
	require.Equal(t, []string{"GET /internal/v1/shards/db/1/snapshot?protocol=" + strconv.Itoa(models.ProtocolVersion) + "&term=4", "POST /internal/v1/shards/db/1/leave?node=n2&term=4"}, got)
}

func TestQueryCountsBeforeTheBody(t *testing.T) {
	var got string
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		w.Header().Set(client.HeaderSeries, "2")
		w.Header().Set(client.HeaderPoints, "5")
		_, _ = w.Write([]byte(`[{"metric":"cpu"}]`))
	})
	cl := client.New(http.DefaultClient)
	ans, err := cl.Query(context.Background(), shardAt(addr), client.QueryRequest{Metric: "cpu", Start: 1, End: 9,
		Tags: map[string]string{"host": "a"}, MaxSeries: 10, MaxPoints: 20})
	require.NoError(t, err)
	require.Equal(t, "/internal/v1/shards/db/1/query?end=9&max_points=20&max_series=10&metric=cpu&start=1&tag=host%3Aa", got)
	require.Equal(t, 2, ans.Series)
	require.Equal(t, 5, ans.Points)
	body, err := io.ReadAll(ans.Body)
	require.NoError(t, err)
	require.NoError(t, ans.Body.Close())
	require.JSONEq(t, `[{"metric":"cpu"}]`, string(body))

	// A node that sends no counts counts 0; one that sends garbage is a
	// bad answer.
	addr = node(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`[]`)) })
	ans, err = cl.Query(context.Background(), shardAt(addr), client.QueryRequest{Metric: "cpu"})
	require.NoError(t, err)
	require.Zero(t, ans.Series+ans.Points)
	ans.Body.Close()
	addr = node(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(client.HeaderSeries, "-1")
		_, _ = w.Write([]byte(`[]`))
	})
	_, err = cl.Query(context.Background(), shardAt(addr), client.QueryRequest{Metric: "cpu"})
	require.ErrorIs(t, err, client.ErrBadAnswer)
}

func TestSelectAndSeries(t *testing.T) {
	want := &query.ShardResult{Raw: []query.RawSeries{{Tags: []query.Tag{{Key: "host", Value: "a"}}, Field: "v", TS: []int64{1, 2}, Values: []float64{3, 4}}}}
	var req query.ShardRequest
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/select"):
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			_, _ = w.Write(query.MarshalResult(want, 0))
		case strings.HasSuffix(r.URL.Path, "/series"):
			require.Equal(t, "mem", r.URL.Query().Get("measurement"))
			require.Equal(t, "10", r.URL.Query().Get("limit"))
			require.Equal(t, "1", r.URL.Query().Get("types"))
			_, _ = w.Write([]byte(`{"keys":["mem,host=a#v","mem,host=b#v"],"field_types":{"mem":{"v":"integer"}}}`))
		}
	})
	cl := client.New(http.DefaultClient)
	res, err := cl.Select(context.Background(), shardAt(addr), &query.ShardRequest{Measurement: "cpu", Raw: true, Start: 1, End: 2})
	require.NoError(t, err)
	require.Equal(t, want.Raw, res.Raw)
	require.Equal(t, query.ShardRequest{Measurement: "cpu", Raw: true, Start: 1, End: 2}, req)
	list, err := cl.Series(context.Background(), shardAt(addr), "mem", 10)
	require.NoError(t, err)
	require.Equal(t, models.SeriesList{Keys: []string{"mem,host=a#v", "mem,host=b#v"},
		Types: models.FieldTypes{"mem": {"v": models.FieldInteger}}}, list)

	// A node of the release before answers the keys alone: floats.
	old := node(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`["mem,host=a#v"]`)) })
	list, err = cl.Series(context.Background(), shardAt(old), "mem", 10)
	require.NoError(t, err)
	require.Equal(t, models.SeriesList{Keys: []string{"mem,host=a#v"}}, list)

	// The InfluxQL side answers a too-large statement 400 (as it always
	// did): the code, not the status, names it.
	addr = node(t, func(w http.ResponseWriter, _ *http.Request) {
		envelope(w, http.StatusBadRequest, fmt.Errorf("%w: too many buckets", models.ErrTooLarge))
	})
	_, err = cl.Select(context.Background(), shardAt(addr), &query.ShardRequest{})
	require.ErrorIs(t, err, models.ErrTooLarge)
	require.NotErrorIs(t, err, models.ErrBadQuery)

	addr = node(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("not a result")) })
	_, err = cl.Select(context.Background(), shardAt(addr), &query.ShardRequest{})
	require.ErrorIs(t, err, client.ErrBadAnswer)
	_, err = cl.Series(context.Background(), shardAt(addr), "", 0)
	require.ErrorIs(t, err, client.ErrBadAnswer)
}

func TestTxn(t *testing.T) {
	var got string
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		_, _ = w.Write([]byte(`{"shards":{"3":{"last_txn_id":9,"last_term":2,"term":3}}}`))
	})
	cl := client.New(http.DefaultClient)
	ans, err := cl.Txn(context.Background(), client.Peer{ID: "n1", Address: addr}, "db", []int{3, 4})
	require.NoError(t, err)
	require.Equal(t, "/internal/v1/txn?db=db&shard=3&shard=4", got)
	require.Equal(t, map[int]models.ReplicaTxn{3: {LastTxnID: 9, LastTerm: 2, Term: 3}}, ans)

	addr = node(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"shards":{"x":{}}}`)) })
	_, err = cl.Txn(context.Background(), client.Peer{ID: "n1", Address: addr}, "db", []int{3})
	require.ErrorIs(t, err, client.ErrBadAnswer)
}

// TestFetchRecords: a batched fetch answer read record by record, entries
// left unread skipped, an undecodable entry reported without breaking the
// stream, and a record naming a shard not asked for refused.
func TestFetchRecords(t *testing.T) {
	e1, e2, e3 := entry(t, 1, "cpu v=1 1"), entry(t, 2, "cpu v=2 2"), entry(t, 3, "cpu v=3 3")
	var req client.FetchRequest
	addr := node(t, func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/internal/v1/fetch", r.URL.Path)
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		var out []byte
		out = client.AppendFetchRecord(out, 0, client.FetchEntries, 0, [][]byte{encode(t, e1), encode(t, e2)})
		out = client.AppendFetchRecord(out, 1, client.FetchEntries, 0, [][]byte{[]byte("garbage"), encode(t, e3)})
		out = client.AppendFetchRecord(out, 2, client.FetchTruncate, 17, nil)
		out = client.AppendFetchRecord(out, 1, client.FetchError, http.StatusConflict, nil)
		_, _ = w.Write(out)
	})
	sent := client.FetchRequest{Node: "f", WaitMS: 100, Shards: []client.FetchShard{{DB: "a", Shard: 0, Term: 2, After: 1, AfterTerm: 1}, {DB: "a", Shard: 1}, {DB: "b"}}}
	ans, err := client.New(http.DefaultClient).Fetch(context.Background(), client.Peer{ID: "n1", Address: addr}, sent)
	require.NoError(t, err)
	defer ans.Close()
	require.Equal(t, sent, req)

	rec, err := ans.Next()
	require.NoError(t, err)
	require.Equal(t, client.FetchRecord{Index: 0, Status: client.FetchEntries, Count: 2}, rec)
	e, err := ans.Entry()
	require.NoError(t, err)
	require.Equal(t, e1, e) // e2 left unread: Next skips it

	rec, err = ans.Next()
	require.NoError(t, err)
	require.Equal(t, client.FetchRecord{Index: 1, Status: client.FetchEntries, Count: 2}, rec)
	_, err = ans.Entry()
	require.ErrorIs(t, err, client.ErrBadEntry)
	e, err = ans.Entry()
	require.NoError(t, err, "the stream goes on past an undecodable entry")
	require.Equal(t, e3, e)
	_, err = ans.Entry()
	require.ErrorIs(t, err, client.ErrBadAnswer, "no entry left in the record")

	rec, err = ans.Next()
	require.NoError(t, err)
	require.Equal(t, client.FetchRecord{Index: 2, Status: client.FetchTruncate, Arg: 17}, rec)
	rec, err = ans.Next()
	require.NoError(t, err)
	require.Equal(t, client.FetchRecord{Index: 1, Status: client.FetchError, Arg: http.StatusConflict}, rec)
	_, err = ans.Next()
	require.ErrorIs(t, err, io.EOF)

	// A record for a shard that was not asked for.
	addr = node(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(client.AppendFetchRecord(nil, 5, client.FetchFullSync, 0, nil))
	})
	ans, err = client.New(http.DefaultClient).Fetch(context.Background(), client.Peer{ID: "n1", Address: addr}, sent)
	require.NoError(t, err)
	defer ans.Close()
	_, err = ans.Next()
	require.ErrorIs(t, err, client.ErrBadAnswer)
}
