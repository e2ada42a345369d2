package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// opsAPI adds /problems and /rebalance to the fake API.
type opsAPI struct {
	mu       sync.Mutex
	problems []map[string]any
	status   int            // of /rebalance; 0 = 200
	plan     map[string]any // answer of /rebalance
	calls    []string       // raw queries of /rebalance
}

func newOpsConsole(t *testing.T, api *fakeAPI, ops *opsAPI) *console {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", api.handler())
	mux.HandleFunc("GET /api/v1/problems", func(w http.ResponseWriter, r *http.Request) {
		ops.mu.Lock()
		defer ops.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"problems": ops.problems})
	})
	mux.HandleFunc("POST /api/v1/rebalance", func(w http.ResponseWriter, r *http.Request) {
		ops.mu.Lock()
		defer ops.mu.Unlock()
		ops.calls = append(ops.calls, r.URL.RawQuery)
		if ops.status != 0 {
			w.WriteHeader(ops.status)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "unavailable", "message": "no master elected"}})
			return
		}
		plan := map[string]any{"dry_run": r.URL.Query().Get("dry_run") == "true"}
		for k, v := range ops.plan {
			plan[k] = v
		}
		_ = json.NewEncoder(w).Encode(plan)
	})
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &console{Page: browsertest.New(t), t: t, api: api, srv: srv}
}

// TestConsoleProblems: the Overview lists the server's problems as text
// (never as markup), the tab title counts the urgent ones, the Databases page
// shows each database's health, and a problem's link opens the view that
// fixes it.
func TestConsoleProblems(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("metrics", "default", 4, 2)
	api.addDB("logs", "default", 2, 2)
	ops := &opsAPI{problems: []map[string]any{
		{"severity": "critical", "kind": "shards_offline", "db": "metrics", "count": 2, "link": "#shards/metrics",
			"message": "database metrics: 2 of 4 shards offline <img src=x onerror=window.__pwned=1>"},
		{"severity": "info", "kind": "node_down", "node": "old", "link": "#overview", "message": "drained storage node old is down"},
	}}
	c := newOpsConsole(t, api, ops)
	c.open("")

	c.WaitJS(`document.querySelectorAll("#problems li").length === 2`)
	require.Equal(t, "(1) Cairn console", browsertest.Eval[string](c.Page, `document.title`), "info is not counted")
	require.Contains(t, browsertest.Eval[string](c.Page, `document.querySelector("#problems li[data-kind=shards_offline]").textContent`),
		"<img src=x onerror=window.__pwned=1>")
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#problems img").length`))

	c.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=databases]`)))
	c.WaitJS(`document.querySelector("#db-list tr[data-db=metrics] td[data-health=critical]") !== null`)
	require.Equal(t, "2 offline", browsertest.Eval[string](c.Page, `document.querySelector("#db-list tr[data-db=metrics] td.health").textContent`))
	require.Equal(t, "healthy", browsertest.Eval[string](c.Page, `document.querySelector("#db-list tr[data-db=logs] td.health").textContent`))

	c.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=overview]`)))
	// The list is drawn again for the tab (a problem links nowhere on the
	// tab it links to): wait for that, or the click may land on a link the
	// redraw has just replaced ("Could not find node with given id").
	c.WaitJS(`location.hash === "#overview" && document.querySelector("#problems li[data-kind=node_down]") !== null && document.querySelector("#problems li[data-kind=node_down] a") === null`)
	c.Do(chromedp.Click(chromedp.CSS(`#problems li[data-kind=shards_offline] a`)))
	c.WaitJS(`location.hash === "#shards/metrics" && document.getElementById("shard-db").value === "metrics" && !document.getElementById("shards").hidden`)

	ops.mu.Lock()
	ops.problems = nil
	ops.mu.Unlock()
	c.WaitJS(`document.title === "Cairn console" && document.querySelector("#problems .all-ok") !== null`)
	require.False(t, browsertest.Eval[bool](c.Page, `window.__pwned === 1`))
}

// TestConsoleRebalance: the button asks for a dry run and shows its plan;
// nothing runs until the operator confirms; errors and empty plans say so.
func TestConsoleRebalance(t *testing.T) {
	api := newFakeAPI(3)
	ops := &opsAPI{status: http.StatusServiceUnavailable}
	c := newOpsConsole(t, api, ops)
	c.open("")

	c.Do(chromedp.Click(chromedp.CSS(`#rebalance`)))
	c.WaitJS(`!document.getElementById("notice").hidden && document.getElementById("notice").textContent.includes("no master elected")`)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("rebalance-plan").hidden`))

	ops.mu.Lock()
	ops.status, ops.plan = 0, map[string]any{"moves": []any{}}
	ops.mu.Unlock()
	c.Do(chromedp.Click(chromedp.CSS(`#rebalance`)))
	c.WaitJS(`document.getElementById("rebalance-plan").textContent.includes("Nothing to do")`)
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#rebalance-go").length`))

	ops.mu.Lock()
	ops.plan = map[string]any{"lower_bound": 1, "moves": []any{
		map[string]any{"kind": "add", "db": "m", "shard": 1, "to": "n-3"},
		map[string]any{"kind": "remove", "db": "m", "shard": 1, "from": "n-1"},
		map[string]any{"kind": "leader", "db": "m", "shard": 2, "from": "n-1", "to": "<b>n-3</b>"},
	}}
	ops.mu.Unlock()
	c.Do(chromedp.Click(chromedp.CSS(`#rebalance`)))
	c.WaitJS(`document.querySelectorAll("#rebalance-plan li").length === 3`)
	require.Equal(t, "2", browsertest.Eval[string](c.Page, `document.getElementById("plan-replicas").textContent`))
	require.Equal(t, "1", browsertest.Eval[string](c.Page, `document.getElementById("plan-leaders").textContent`))
	require.Equal(t, "leader of m shard 2: n-1 → <b>n-3</b>", browsertest.Eval[string](c.Page, `document.querySelector("#rebalance-plan li[data-kind=leader]").textContent`))
	c.Screenshot("plan")
	ops.mu.Lock()
	require.Equal(t, []string{"dry_run=true", "dry_run=true", "dry_run=true"}, ops.calls, "only dry runs so far")
	ops.plan["moves"] = ops.plan["moves"].([]any)[:2] // the cluster changed meanwhile
	ops.mu.Unlock()

	c.Do(chromedp.Click(chromedp.CSS(`#rebalance-go`)))
	c.WaitJS(`document.getElementById("notice").textContent.startsWith("Rebalance started: 2 replica move(s) and 0 leader transfer(s) (the cluster changed since the dry run, which showed 3 steps)")`)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("rebalance-plan").hidden`))
	ops.mu.Lock()
	require.Equal(t, []string{"dry_run=true", "dry_run=true", "dry_run=true", ""}, ops.calls)
	ops.mu.Unlock()
}
