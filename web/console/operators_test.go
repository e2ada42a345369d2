package console

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/stretchr/testify/require"
)

// TestConsoleOperators: the Overview lists the master's operators in flight
// from GET /operators, one row per shard with its step as "step i of n" of
// its kind, API strings shown as text; the panel hides when none are left.
func TestConsoleOperators(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("metrics", "default", 4, 2)
	c := newConsole(t, api)
	c.open("")
	c.WaitJS(`document.getElementById("master").textContent === "n-1"`)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("operators").hidden`), "no operators: no panel")

	created := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
	api.set(func(f *fakeAPI) {
		f.operators = []map[string]any{
			{"db": "metrics", "shard": 3, "kind": "move", "from": []string{"n-1", "n-2"}, "to": []string{"n-2", "n-3"},
				"leader": "n-3", "step": "wait-in-sync", "master_term": 4, "created": created},
			{"db": "metrics", "shard": 1, "kind": "transfer-leader", "from_leader": "n-1", "leader": "<b>n-3</b>",
				"step": "transfer-leader", "master_term": 4, "created": created},
			{"db": "metrics", "shard": 2, "kind": "move", "from": []string{"n-1"}, "to": []string{"n-3"},
				"step": "remove-replicas", "master_term": 4, "created": created},
		}
		f.unreadable = []string{"/cairn/operators/metrics/9: <img src=x onerror=window.__pwned=1>"}
	})
	c.WaitJS(`document.querySelectorAll("#operators tr[data-op]").length === 3`)
	require.False(t, browsertest.Eval[bool](c.Page, `document.getElementById("operators").hidden`))
	require.Equal(t, "3", browsertest.Eval[string](c.Page, `document.getElementById("op-count").textContent`))
	// Rows are sorted by database and shard.
	require.Equal(t, []string{"metrics/1", "metrics/2", "metrics/3"},
		browsertest.Eval[[]string](c.Page, `Array.from(document.querySelectorAll("#operators tr[data-op]")).map((r) => r.dataset.op)`))

	row := func(op, sel string) string {
		return browsertest.Eval[string](c.Page, `document.querySelector("#operators tr[data-op='`+op+`'] `+sel+`").textContent`)
	}
	require.Equal(t, "move", row("metrics/3", "td:nth-child(3)"))
	require.Equal(t, "n-1, n-2 → n-2, n-3 (leader n-3)", row("metrics/3", "td.ft"))
	require.Equal(t, "step 2 of 5: wait-in-sync", row("metrics/3", "td.step span"))
	require.Equal(t, 1, browsertest.Eval[int](c.Page, `document.querySelector("#operators tr[data-op='metrics/3'] progress").value`))
	require.Equal(t, 5, browsertest.Eval[int](c.Page, `document.querySelector("#operators tr[data-op='metrics/3'] progress").max`))
	require.Equal(t, "step 4 of 5: remove-replicas", row("metrics/2", "td.step span"))
	require.Equal(t, "step 1 of 1: transfer-leader", row("metrics/1", "td.step span"))
	require.Equal(t, "n-1 → <b>n-3</b>", row("metrics/1", "td.ft"), "API strings are text, not markup")
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#operators b, #operators img").length`))
	require.Regexp(t, `^10m \d+s$`, row("metrics/3", "td:last-child"))
	require.Equal(t, "remove-replicas: 1 · transfer-leader: 1 · wait-in-sync: 1",
		browsertest.Eval[string](c.Page, `document.querySelector("#operators .op-steps").textContent`))
	require.Contains(t, browsertest.Eval[string](c.Page, `document.querySelector("#operators .op-bad").textContent`),
		"1 operator record(s) in etcd cannot be read: /cairn/operators/metrics/9: <img src=x onerror=window.__pwned=1>")
	c.Screenshot("operators")

	// The operator advances: the row follows on the next refresh.
	api.set(func(f *fakeAPI) { f.operators[0]["step"] = "transfer-leader"; f.unreadable = nil })
	c.WaitJS(`document.querySelector("#operators tr[data-op='metrics/3'] td.step span").textContent === "step 5 of 5: transfer-leader"`)
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#operators .op-bad").length`))

	api.set(func(f *fakeAPI) { f.operators = nil })
	c.WaitJS(`document.getElementById("operators").hidden`)
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#operators tr").length`))
	require.False(t, browsertest.Eval[bool](c.Page, `window.__pwned === 1`))
}
