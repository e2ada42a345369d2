package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The Charts tab draws one line per node from GET /api/v1/history, leaves
// out nodes without a series, and lists nodes whose history is missing.
func TestConsoleCharts(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	col := func(vs ...*float64) []*float64 { return vs }
	history := map[string]any{
		"series": []string{"write_points_per_s", "leaders"},
		"nodes": []map[string]any{
			{"node_id": "n-1", "interval_s": 10, "time": []int64{1700000000, 1700000010, 1700000020},
				"series": map[string]any{"write_points_per_s": col(nil, f(1200), f(1500)), "leaders": col(f(3), f(3), f(4))}},
			{"node_id": "n-2", "interval_s": 10, "time": []int64{1700000005, 1700000015},
				"series": map[string]any{"write_points_per_s": col(nil, nil), "leaders": col(f(5), f(4))}},
			{"node_id": "n-3", "error": "node n-3 unreachable: connection refused"},
		},
	}
	api := newFakeAPI(2)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/history", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(history)
	})
	mux.Handle("/api/v1/", api.handler())
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p := browsertest.New(t)
	p.Do(chromedp.Navigate(srv.URL + "/#charts"))
	p.WaitJS(`window.cairnCharts && window.cairnCharts.polls > 0 && !document.getElementById("charts").hidden`)

	// Leaders: both nodes, on the merged time axis (5 distinct seconds).
	require.Equal(t, "2", browsertest.Eval[string](p, `document.getElementById("chart-leaders").dataset.nodes`))
	require.Equal(t, "5", browsertest.Eval[string](p, `document.getElementById("chart-leaders").dataset.points`))
	require.Equal(t, []any{"n-1", "n-2"}, browsertest.Eval[[]any](p, `window.cairnCharts.plots.leaders.series.slice(1).map(s => s.label)`))
	require.Equal(t, []any{1700000000.0, 1700000005.0, 1700000010.0, 1700000015.0, 1700000020.0},
		browsertest.Eval[[]any](p, `window.cairnCharts.plots.leaders.data[0]`))
	require.Equal(t, []any{nil, 5.0, nil, 4.0, nil}, browsertest.Eval[[]any](p, `window.cairnCharts.plots.leaders.data[2]`))
	// Writes: only n-1 has values.
	require.Equal(t, []any{"n-1"}, browsertest.Eval[[]any](p, `window.cairnCharts.plots.write_points_per_s.series.slice(1).map(s => s.label)`))
	require.Equal(t, "2", browsertest.Eval[string](p, `document.getElementById("chart-write_points_per_s").dataset.points`))
	require.True(t, browsertest.Eval[bool](p, `document.querySelector("#chart-write_points_per_s canvas").width > 0`))
	// Nothing reports queries: the chart says so instead of drawing.
	require.False(t, browsertest.Eval[bool](p, `document.querySelector("#chart-queries_per_s .empty").hidden`))
	require.Nil(t, browsertest.Eval[any](p, `window.cairnCharts.plots.queries_per_s || null`))
	require.Contains(t, browsertest.Eval[string](p, `document.getElementById("charts-errors").textContent`), "n-3: node n-3 unreachable")
	require.Contains(t, browsertest.Eval[string](p, `document.getElementById("charts-info").textContent`), "3 nodes, one sample every 10 s")
	p.Screenshot("charts")
}

func TestHandlerServesChartAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	_, page := get(t, srv, http.MethodGet, "/", nil)
	for path, ctype := range map[string]string{
		"/console/charts.js": "text/javascript; charset=utf-8", "/console/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/console/charts.css": "text/css; charset=utf-8", "/console/uPlot.min.css": "text/css; charset=utf-8",
	} {
		resp, body := get(t, srv, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, ctype, resp.Header.Get("Content-Type"), path)
		require.NotEmpty(t, body, path)
		require.Contains(t, page, `"`+path+`"`, "index.html loads %s", path)
	}
	resp, _ := get(t, srv, http.MethodGet, "/console/uPlot.LICENSE", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "only listed assets are served")
}
