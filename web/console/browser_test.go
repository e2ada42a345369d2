package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// console serves the console and the fake API from one origin, as a real
// node does, and drives it with a fresh headless Chromium.
type console struct {
	*browsertest.Page
	t   testing.TB
	api *fakeAPI
	srv *httptest.Server
}

func newConsole(t testing.TB, api *fakeAPI) *console {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", api.handler())
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	// Registered before the browser's cleanups, so the server outlives the
	// page: a closed server would make the final poll throw.
	t.Cleanup(srv.Close)
	return &console{Page: browsertest.New(t), t: t, api: api, srv: srv}
}

func (c *console) open(hash string) {
	c.t.Helper()
	c.Do(chromedp.Navigate(c.srv.URL + "/" + hash))
	c.WaitJS(`window.cairnConsole && document.getElementById("etcd-pill").textContent !== "etcd ?"`)
}

// cellsJS counts shard-map cells matching a CSS selector suffix.
func cellsJS(sel string) string {
	return fmt.Sprintf(`document.querySelectorAll(%q).length`, "#shard-map td[data-shard]"+sel)
}

func TestConsoleOverviewAndBanner(t *testing.T) {
	api := newFakeAPI(4)
	api.addDB("metrics", "default", 6, 3)
	c := newConsole(t, api)
	c.open("")

	c.WaitJS(`document.getElementById("master").textContent === "n-1"`)
	require.Contains(t, browsertest.Eval[string](c.Page, `document.getElementById("master-sub").textContent`), "term 3")
	require.Equal(t, "6", browsertest.Eval[string](c.Page, `document.getElementById("storage-count").textContent`), "4 default + 2 archive")
	nodes := browsertest.Eval[string](c.Page, `document.getElementById("storage-nodes").textContent`)
	for _, id := range []string{"n-1", "n-2", "n-3", "n-4", "a-1"} {
		require.Contains(t, nodes, id)
	}
	require.Contains(t, nodes, "Last change", "liveness is the lease: the record's age is its last change, not a heartbeat")
	// Labels and weights under the address (the fake gives n-2 zone b, rack
	// r1, weight 2).
	require.Contains(t, nodes, "10.0.0.2:9000rack=r1 · zone=b · weight 2")
	// The Shards column is the record's shards_hosted: 6 shards x RF 3 over
	// the 4 default nodes hold 18 replicas.
	hosted := browsertest.Eval[int](c.Page, `Array.from(document.querySelectorAll("#storage-nodes tr")).slice(1)
		.filter((tr) => tr.cells[0].textContent === "default").reduce((s, tr) => s + Number(tr.cells[5].textContent), 0)`)
	require.Equal(t, 18, hosted)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("banner").hidden`), "banner shown while healthy")

	api.set(func(f *fakeAPI) { f.etcdDown = true; f.draining["n-3"] = true })
	c.WaitJS(`!document.getElementById("banner").hidden`)
	require.Contains(t, browsertest.Eval[string](c.Page, `document.getElementById("banner").textContent`),
		"etcd unreachable: showing the local copy of cluster state; metadata changes are refused until it returns")
	c.WaitJS(`document.querySelector("#storage-nodes .badge.drain") !== null`)
	require.Equal(t, "etcd down", browsertest.Eval[string](c.Page, `document.getElementById("etcd-pill").textContent`))
	c.Screenshot("degraded")

	api.set(func(f *fakeAPI) { f.etcdDown = false })
	c.WaitJS(`document.getElementById("banner").hidden`)
}

func TestConsoleCreateDatabaseThenDrain(t *testing.T) {
	api := newFakeAPI(4)
	c := newConsole(t, api)
	c.open("#databases")
	c.WaitJS(`[...document.querySelectorAll("#db-form select[name=storage_cluster] option")].some(o => o.value === "default")`)

	c.Do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "metrics"),
		chromedp.SetValue(chromedp.CSS(`#db-form select[name=storage_cluster]`), "default"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=num_shards]`), "12"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "3"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.WaitJS(`document.querySelector("#db-list tr[data-db=metrics]") !== null`)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("db-error").hidden`))

	c.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	c.WaitJS(cellsJS(`[data-role=leader]`) + ` === 12`)
	require.Equal(t, "metrics", browsertest.Eval[string](c.Page, `document.getElementById("shard-db").value`))
	require.Equal(t, 36, browsertest.Eval[int](c.Page, cellsJS(`:not([data-role=none])`)), "12 shards x 3 replicas")
	require.Equal(t, 48, browsertest.Eval[int](c.Page, cellsJS(``)), "12 shards x 4 nodes")
	require.Positive(t, browsertest.Eval[int](c.Page, cellsJS(`[data-node="n-2"]:not([data-role=none])`)))

	c.Do(chromedp.Click(chromedp.CSS(`#shard-map th[data-node="n-2"] button.drain`)))
	c.WaitJS(cellsJS(`[data-node="n-2"]:not([data-role=none])`) + ` === 0`)
	c.WaitJS(`document.querySelector('#shard-map th[data-node="n-2"].dr button.undrain') !== null`)
	require.Equal(t, 36, browsertest.Eval[int](c.Page, cellsJS(`:not([data-role=none])`)), "every replica moved, none lost")
	require.Equal(t, 12, browsertest.Eval[int](c.Page, cellsJS(`[data-role=leader]`)))
	require.Positive(t, browsertest.Eval[int](c.Page, cellsJS(`[data-role=stale]`)), "moved replicas join out of sync")
	require.Equal(t, 12, browsertest.Eval[int](c.Page, cellsJS(`[data-node="n-2"].dr`)), "the draining column is marked")
	api.set(func(f *fakeAPI) { require.True(t, f.draining["n-2"]) })
}

func TestConsoleCreateShowsAPIError(t *testing.T) {
	api := newFakeAPI(4)
	api.addDB("taken", "default", 2, 1)
	c := newConsole(t, api)
	c.open("#databases")
	c.WaitJS(`document.querySelector("#db-list tr[data-db=taken]") !== null`)

	c.Do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "big"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "9"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.WaitJS(`!document.getElementById("db-error").hidden`)
	require.Equal(t, "replica factor 9 exceeds the 4 live storage nodes of cluster default",
		browsertest.Eval[string](c.Page, `document.getElementById("db-error").textContent`))

	c.Do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "taken"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "1"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.WaitJS(`document.getElementById("db-error").textContent === "database taken already exists"`)
	api.set(func(f *fakeAPI) { require.Len(t, f.dbs, 1) })
}

func TestConsoleDeleteNeedsTypedName(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("old", "default", 2, 1)
	api.addDB("keep", "default", 2, 1)
	c := newConsole(t, api)
	c.open("#databases")
	c.WaitJS(`document.querySelector("#db-list button.delete[data-db=old]") !== null`)

	c.Do(chromedp.Click(chromedp.CSS(`#db-list button.delete[data-db=old]`)))
	c.WaitJS(`!document.getElementById("db-delete").hidden`)
	c.Do(chromedp.SendKeys(chromedp.CSS(`#db-delete-name`), "ol"))
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("db-delete-go").disabled`), "enabled before the full name")
	c.Do(chromedp.SendKeys(chromedp.CSS(`#db-delete-name`), "d"))
	c.WaitJS(`!document.getElementById("db-delete-go").disabled`)
	c.Do(chromedp.Click(chromedp.CSS(`#db-delete-go`)))

	c.WaitJS(`document.querySelector("#db-list tr[data-db=old]") === null`)
	require.True(t, browsertest.Eval[bool](c.Page, `document.getElementById("db-delete").hidden`))
	require.True(t, browsertest.Eval[bool](c.Page, `document.querySelector("#db-list tr[data-db=keep]") !== null`))
	api.set(func(f *fakeAPI) {
		require.NotContains(t, f.dbs, "old")
		require.Contains(t, f.dbs, "keep")
	})
}

func TestConsoleLeaderTransfer(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("metrics", "default", 4, 3)
	c := newConsole(t, api)
	c.open("#shards")
	c.WaitJS(cellsJS(`[data-shard="2"][data-role=follower]`) + ` === 2`)

	target := browsertest.Eval[string](c.Page, `document.querySelector('#shard-map td[data-shard="2"][data-role=follower]').dataset.node`)
	c.Do(chromedp.Click(chromedp.CSS(`#shard-map td[data-shard="2"][data-role=follower]`)))
	c.WaitJS(`!document.getElementById("shard-action").hidden`)
	require.Contains(t, browsertest.Eval[string](c.Page, `document.getElementById("shard-action").textContent`), "Make "+target+" leader of shard 2")
	c.Do(chromedp.Click(chromedp.CSS(`#shard-leader-go`)))

	c.WaitJS(fmt.Sprintf(`document.querySelector('#shard-map td[data-shard="2"][data-node=%q]').dataset.role === "leader"`, target))
	require.Equal(t, 1, browsertest.Eval[int](c.Page, cellsJS(`[data-shard="2"][data-role=leader]`)))
	require.Contains(t, browsertest.Eval[string](c.Page, `document.querySelector('#shard-map tbody tr:nth-child(3) td.info').textContent`), "term 2")
	api.set(func(f *fakeAPI) { require.Equal(t, target, f.dbs["metrics"].shards[2].Leader) })
}

func TestConsoleAdminToken(t *testing.T) {
	api := newFakeAPI(3)
	api.token = "s3cret"
	c := newConsole(t, api)
	c.open("#databases")
	c.WaitJS(`document.querySelector("#db-form select[name=storage_cluster] option") !== null`)

	c.Do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "guarded"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "2"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.WaitJS(`!document.getElementById("token-box").hidden`)
	require.Contains(t, browsertest.Eval[string](c.Page, `document.getElementById("db-error").textContent`), "admin token")

	c.Do(
		chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret"),
		chromedp.Click(chromedp.CSS(`#token-save`)),
	)
	c.WaitJS(`document.getElementById("token-box").hidden`)
	// Kept for this tab only, never in localStorage (which outlives it).
	require.Equal(t, "s3cret", browsertest.Eval[string](c.Page, `sessionStorage.getItem("cairn.admin_token")`))
	require.True(t, browsertest.Eval[bool](c.Page, `localStorage.getItem("cairn.admin_token") === null`))
	c.Do(chromedp.Click(chromedp.CSS(`#db-create`)))
	c.WaitJS(`document.querySelector("#db-list tr[data-db=guarded]") !== null`)
	api.set(func(f *fakeAPI) {
		require.Equal(t, []string{"", "Bearer s3cret"}, f.auths)
	})
}

// TestConsoleReadToken: with a read token set, the console's reads get 401
// until the operator enters the token, then show the cluster.
func TestConsoleReadToken(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("metrics", "default", 4, 2)
	api.readToken = "r3ad"
	c := newConsole(t, api)
	c.open("#databases")
	c.WaitJS(`!document.getElementById("token-box").hidden`)
	require.Equal(t, 0, browsertest.Eval[int](c.Page, `document.querySelectorAll("#db-list tr[data-db]").length`))
	c.Do(
		chromedp.SendKeys(chromedp.CSS(`#token`), "r3ad"),
		chromedp.Click(chromedp.CSS(`#token-save`)),
	)
	c.WaitJS(`document.querySelector("#db-list tr[data-db=metrics]") !== null`)
}

// TestConsoleShardMapRoles checks every cell against the fake's state,
// including an offline shard and an out-of-sync replica.
func TestConsoleShardMapRoles(t *testing.T) {
	api := newFakeAPI(5)
	db := api.addDB("mixed", "default", 10, 3)
	api.set(func(f *fakeAPI) {
		db.shards[3].ISR = db.shards[3].ISR[:2] // third replica still syncing
		s := db.shards[7]
		s.Status, s.Leader, s.ISR, s.Reason = "offline", "", nil, "no replica alive"
	})
	c := newConsole(t, api)
	c.open("#shards")
	c.WaitJS(cellsJS(``) + ` === 50`)

	got := browsertest.Eval[map[string]string](c.Page, `Object.fromEntries([...document.querySelectorAll("#shard-map td[data-shard]")]
		.map(td => [td.dataset.shard + "/" + td.dataset.node, td.dataset.role]))`)
	want := map[string]string{}
	api.set(func(f *fakeAPI) {
		for _, s := range db.shards {
			for _, n := range f.clusters["default"] {
				role := "none"
				switch {
				case !slices.Contains(s.Replicas, n):
				case s.Leader == n && s.Status == "online":
					role = "leader"
				case slices.Contains(s.ISR, n):
					role = "follower"
				default:
					role = "stale"
				}
				want[fmt.Sprintf("%d/%s", s.ID, n)] = role
			}
		}
	})
	require.Equal(t, want, got)
	require.Equal(t, 1, browsertest.Eval[int](c.Page, `document.querySelectorAll("#shard-map tr.offline").length`))
	require.Contains(t, browsertest.Eval[string](c.Page, `document.querySelector("#shard-map tr.offline td.info").textContent`), "no replica alive")
	require.Contains(t, browsertest.Eval[string](c.Page, `document.getElementById("shard-summary").textContent`), "1 offline · 4 out-of-sync replicas")
}
