package influx

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

// TestDeleteStatements: DELETE, DROP SERIES and DROP MEASUREMENT become
// one delete per measurement with their tag terms and time range (time <
// X is up to X-1, inclusive bounds), answered with no rows; a condition a
// delete cannot express is refused and deletes nothing.
func TestDeleteStatements(t *testing.T) {
	host := func(v string) []lineproto.Tag { return []lineproto.Tag{{Key: "host", Value: v}} }
	const x = 1_500_000_000_000_000_000
	for _, c := range []struct {
		q    string
		want []wire.Delete
		err  string
	}{
		{q: "DELETE FROM cpu WHERE host = 'a' AND time < '2017-07-14T02:40:00Z'", want: []wire.Delete{{Metric: "cpu", Tags: host("a"), Min: math.MinInt64, Max: x - 1}}},
		{q: "DELETE FROM cpu WHERE time >= 1500000000000000000 AND time <= 1500000000000000009", want: []wire.Delete{{Metric: "cpu", Min: x, Max: x + 9}}},
		{q: "DELETE FROM cpu, mem WHERE (dc = 'x' AND host = 'b')", want: []wire.Delete{
			{Metric: "cpu", Tags: []lineproto.Tag{{Key: "dc", Value: "x"}, {Key: "host", Value: "b"}}, Min: math.MinInt64, Max: math.MaxInt64},
			{Metric: "mem", Tags: []lineproto.Tag{{Key: "dc", Value: "x"}, {Key: "host", Value: "b"}}, Min: math.MinInt64, Max: math.MaxInt64}}},
		{q: "DELETE WHERE time < now() - 1h", want: []wire.Delete{{Metric: "m", Min: math.MinInt64, Max: 1_600_000_000_000_000_000 - 3600e9 - 1}}},
		{q: "DROP SERIES FROM cpu WHERE host = 'a'", want: []wire.Delete{{Metric: "cpu", Tags: host("a"), Min: math.MinInt64, Max: math.MaxInt64}}},
		{q: "DROP SERIES WHERE host = 'a'", want: []wire.Delete{{Metric: "m", Tags: host("a"), Min: math.MinInt64, Max: math.MaxInt64}}},
		{q: "DROP MEASUREMENT cpu", want: []wire.Delete{{Metric: "cpu", Min: math.MinInt64, Max: math.MaxInt64}}},
		{q: "DELETE FROM cpu WHERE host = 'a' AND host = 'b'"}, // matches nothing
		{q: "DELETE FROM cpu WHERE host = 'a' OR host = 'b'", err: "OR in a delete's condition"},
		{q: "DELETE FROM cpu WHERE value > 1", err: "only tag = 'value' and time ranges"},
		{q: "DELETE FROM cpu WHERE host != 'a'", err: "only tag = 'value' and time ranges"},
		{q: "DELETE FROM /c.*/ WHERE host = 'a'", err: "name the measurements"},
		{q: "DROP SERIES FROM cpu WHERE time < now()", err: "DROP SERIES takes no time condition"},
	} {
		fb := &fakeBackend{}
		srv := serve(t, fb)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/query?db=db&q="+url.QueryEscape(c.q), nil))
		require.Equal(t, 200, w.Code, c.q)
		var body struct {
			Results []struct {
				Error string `json:"error"`
			} `json:"results"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), c.q)
		if c.err != "" {
			require.Contains(t, body.Results[0].Error, c.err, c.q)
			require.Empty(t, fb.deletes, c.q)
			continue
		}
		require.JSONEq(t, `{"results":[{"statement_id":0}]}`, w.Body.String(), c.q)
		require.Equal(t, c.want, fb.deletes, c.q)
	}
}
