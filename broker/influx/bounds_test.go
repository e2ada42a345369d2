package influx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

func TestCheckQueryText(t *testing.T) {
	deep := func(n int) string {
		return "SELECT " + strings.Repeat("(", n) + "v" + strings.Repeat(")", n) + " FROM m"
	}
	for _, tc := range []struct {
		name, q string
		want    error
	}{
		{"plain", "SELECT mean(v) FROM m WHERE time > now() - 1h GROUP BY time(1m)", nil},
		{"at the limit", deep(MaxNesting), nil},
		{"past the limit", deep(MaxNesting + 1), errTooDeep},
		{"sequential groups are not nesting", "SELECT " + strings.Repeat("(v)+", 500) + "v FROM m", nil},
		{"parentheses in strings do not count", "SELECT v FROM m WHERE t = '" + strings.Repeat("(", 500) + "'", nil},
		{"in identifiers neither", `SELECT "` + strings.Repeat("(", 500) + `" FROM m`, nil},
		{"an escaped quote stays in the string", `SELECT v FROM m WHERE t = '\'` + strings.Repeat("(", 500) + "'", nil},
		{"an unclosed string is the parser's", "SELECT v FROM m WHERE t = '((", nil},
		{"too long", strings.Repeat("x", 1001), errQueryTooLarge},
	} {
		err := checkQueryText(tc.q, 1000+len(tc.q)*boolInt(tc.want != errQueryTooLarge))
		if tc.want == nil {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, tc.want, tc.name)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestQueryBounds: a query past the size limit gets 413 and one nesting
// past MaxNesting 400, both before the parser sees them (a 2 MB nest of
// parentheses overflows its stack); a form body past the limit is not read
// whole.
func TestQueryBounds(t *testing.T) {
	srv := serve(t, &fakeBackend{})
	do := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	nested := "SELECT " + strings.Repeat("(", 1<<20) + "v" + strings.Repeat(")", 1<<20) + " FROM m"
	r := httptest.NewRequest("POST", "/query?db=db", strings.NewReader(url.Values{"q": {nested}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := do(r)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "--query-max-bytes")

	small := "SELECT " + strings.Repeat("(", 20_000) + "v" + strings.Repeat(")", 20_000) + " FROM m"
	w = do(httptest.NewRequest("GET", "/query?db=db&q="+url.QueryEscape(small), nil))
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Contains(t, w.Body.String(), "more than 100 nested parentheses")

	// Under the limits the query runs.
	w = do(httptest.NewRequest("GET", "/query?db=db&q="+url.QueryEscape("SHOW SERIES WHERE ((host = 'a'))"), nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
}

// blockingBackend's Select waits for its context to end.
type blockingBackend struct{ fakeBackend }

func (b *blockingBackend) Select(ctx context.Context, _ string, _ *query.ShardRequest) ([]*query.ShardResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestQueryTimeout: a statement past --query-timeout answers InfluxDB's
// timeout error in its result, and its shards' context ends with it.
func TestQueryTimeout(t *testing.T) {
	e := gin.New()
	h := New(Config{Backend: &blockingBackend{}, QueryTimeout: 50 * time.Millisecond})
	h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&q="+url.QueryEscape("SELECT v FROM m; SHOW DATABASES"), nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.JSONEq(t, `{"results":[{"statement_id":0,"error":"query-timeout limit exceeded (50ms, --query-timeout)"},
		{"statement_id":1,"series":[{"name":"databases","columns":["name"],"values":[["db"]]}]}]}`, w.Body.String())
}
