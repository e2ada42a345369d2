package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait on the page. The console polls once a second,
// so anything that takes longer than this is a bug, not a slow machine.
const waitTimeout = 20 * time.Second

// chromiumPath is where CI installs Chromium; CAIRN_CHROMIUM overrides it.
func chromiumPath() string {
	if p := os.Getenv("CAIRN_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// console serves the console and the fake API from one origin, as a real
// node does, and drives it with a fresh headless Chromium.
type console struct {
	t   testing.TB
	api *fakeAPI
	srv *httptest.Server
	ctx context.Context

	artifacts  string // directory for PNG screenshots
	mu         sync.Mutex
	exceptions []string
}

func newConsole(t testing.TB, api *fakeAPI) *console {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		// Fail, not skip: a console that no test has rendered must not ship.
		t.Fatalf("headless Chromium not found at %s (%v): install it (apt-get install -y chromium) or set CAIRN_CHROMIUM", path, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", api.handler())
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// The first Run starts the browser; it must not carry a timeout, which
	// would end the browser with it.
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	c := &console{t: t, api: api, srv: srv, ctx: ctx}

	// Collect uncaught exceptions and unhandled rejections: a script error
	// fails the test even when the page happens to look right.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() {
				c.mu.Lock()
				c.exceptions = append(c.exceptions, m.String())
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
	})
	c.artifacts = os.Getenv("CAIRN_ARTIFACTS")
	if c.artifacts == "" {
		c.artifacts = t.TempDir()
	}
	// Registered after the browser's cleanup, so it runs first: the
	// screenshot also shows the page as it was when a test failed.
	t.Cleanup(func() { c.screenshot("") })
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		require.Empty(t, c.exceptions, "JavaScript exceptions in the console")
	})
	return c
}

func (c *console) do(actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, waitTimeout)
	defer cancel()
	require.NoError(c.t, chromedp.Do(ctx, actions...))
}

func (c *console) open(hash string) {
	c.t.Helper()
	c.do(chromedp.Navigate(c.srv.URL + "/" + hash))
	c.waitJS(`window.cairnConsole && document.getElementById("etcd-pill").textContent !== "etcd ?"`)
}

// waitJS waits until the JavaScript expression is truthy.
func (c *console) waitJS(expr string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, waitTimeout)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr,
			chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout)))
		// Right after a navigation chromedp may still hold the old page's
		// JavaScript context for a moment; the poll then runs again in the new one.
		if err != nil && strings.Contains(err.Error(), "Cannot find context with specified id") && ctx.Err() == nil {
			continue
		}
		require.NoError(c.t, err, "waiting for %s", expr)
		return
	}
}

func evalJS[T any](c *console, expr string) T {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, waitTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(c.t, err, "evaluating %s", expr)
	return v
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// screenshot saves the page as <test name>[-suffix].png in the artifacts dir.
func (c *console) screenshot(suffix string) {
	ctx, cancel := context.WithTimeout(c.ctx, waitTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Errorf("screenshot: %v", err)
		return
	}
	name := c.t.Name()
	if suffix != "" {
		name += "-" + suffix
	}
	file := filepath.Join(c.artifacts, unsafeName.ReplaceAllString(name, "_")+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		c.t.Errorf("write screenshot: %v", err)
		return
	}
	c.t.Logf("screenshot: %s", file)
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

	c.waitJS(`document.getElementById("master").textContent === "n-1"`)
	require.Contains(t, evalJS[string](c, `document.getElementById("master-sub").textContent`), "term 3")
	require.Equal(t, "6", evalJS[string](c, `document.getElementById("storage-count").textContent`), "4 default + 2 archive")
	nodes := evalJS[string](c, `document.getElementById("storage-nodes").textContent`)
	for _, id := range []string{"n-1", "n-2", "n-3", "n-4", "a-1"} {
		require.Contains(t, nodes, id)
	}
	require.True(t, evalJS[bool](c, `document.getElementById("banner").hidden`), "banner shown while healthy")

	api.set(func(f *fakeAPI) { f.etcdDown = true; f.draining["n-3"] = true })
	c.waitJS(`!document.getElementById("banner").hidden`)
	require.Contains(t, evalJS[string](c, `document.getElementById("banner").textContent`),
		"etcd unreachable: showing the local copy of cluster state; metadata changes are refused until it returns")
	c.waitJS(`document.querySelector("#storage-nodes .badge.drain") !== null`)
	require.Equal(t, "etcd down", evalJS[string](c, `document.getElementById("etcd-pill").textContent`))
	c.screenshot("degraded")

	api.set(func(f *fakeAPI) { f.etcdDown = false })
	c.waitJS(`document.getElementById("banner").hidden`)
}

func TestConsoleCreateDatabaseThenDrain(t *testing.T) {
	api := newFakeAPI(4)
	c := newConsole(t, api)
	c.open("#databases")
	c.waitJS(`[...document.querySelectorAll("#db-form select[name=storage_cluster] option")].some(o => o.value === "default")`)

	c.do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "metrics"),
		chromedp.SetValue(chromedp.CSS(`#db-form select[name=storage_cluster]`), "default"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=num_shards]`), "12"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "3"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.waitJS(`document.querySelector("#db-list tr[data-db=metrics]") !== null`)
	require.True(t, evalJS[bool](c, `document.getElementById("db-error").hidden`))

	c.do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	c.waitJS(cellsJS(`[data-role=leader]`) + ` === 12`)
	require.Equal(t, "metrics", evalJS[string](c, `document.getElementById("shard-db").value`))
	require.Equal(t, 36, evalJS[int](c, cellsJS(`:not([data-role=none])`)), "12 shards x 3 replicas")
	require.Equal(t, 48, evalJS[int](c, cellsJS(``)), "12 shards x 4 nodes")
	require.Positive(t, evalJS[int](c, cellsJS(`[data-node="n-2"]:not([data-role=none])`)))

	c.do(chromedp.Click(chromedp.CSS(`#shard-map th[data-node="n-2"] button.drain`)))
	c.waitJS(cellsJS(`[data-node="n-2"]:not([data-role=none])`) + ` === 0`)
	c.waitJS(`document.querySelector('#shard-map th[data-node="n-2"].dr button.undrain') !== null`)
	require.Equal(t, 36, evalJS[int](c, cellsJS(`:not([data-role=none])`)), "every replica moved, none lost")
	require.Equal(t, 12, evalJS[int](c, cellsJS(`[data-role=leader]`)))
	require.Positive(t, evalJS[int](c, cellsJS(`[data-role=stale]`)), "moved replicas join out of sync")
	require.Equal(t, 12, evalJS[int](c, cellsJS(`[data-node="n-2"].dr`)), "the draining column is marked")
	api.set(func(f *fakeAPI) { require.True(t, f.draining["n-2"]) })
}

func TestConsoleCreateShowsAPIError(t *testing.T) {
	api := newFakeAPI(4)
	api.addDB("taken", "default", 2, 1)
	c := newConsole(t, api)
	c.open("#databases")
	c.waitJS(`document.querySelector("#db-list tr[data-db=taken]") !== null`)

	c.do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "big"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "9"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.waitJS(`!document.getElementById("db-error").hidden`)
	require.Equal(t, "replica factor 9 exceeds the 4 live storage nodes of cluster default",
		evalJS[string](c, `document.getElementById("db-error").textContent`))

	c.do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "taken"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "1"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.waitJS(`document.getElementById("db-error").textContent === "database taken already exists"`)
	api.set(func(f *fakeAPI) { require.Len(t, f.dbs, 1) })
}

func TestConsoleDeleteNeedsTypedName(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("old", "default", 2, 1)
	api.addDB("keep", "default", 2, 1)
	c := newConsole(t, api)
	c.open("#databases")
	c.waitJS(`document.querySelector("#db-list button.delete[data-db=old]") !== null`)

	c.do(chromedp.Click(chromedp.CSS(`#db-list button.delete[data-db=old]`)))
	c.waitJS(`!document.getElementById("db-delete").hidden`)
	c.do(chromedp.SendKeys(chromedp.CSS(`#db-delete-name`), "ol"))
	require.True(t, evalJS[bool](c, `document.getElementById("db-delete-go").disabled`), "enabled before the full name")
	c.do(chromedp.SendKeys(chromedp.CSS(`#db-delete-name`), "d"))
	c.waitJS(`!document.getElementById("db-delete-go").disabled`)
	c.do(chromedp.Click(chromedp.CSS(`#db-delete-go`)))

	c.waitJS(`document.querySelector("#db-list tr[data-db=old]") === null`)
	require.True(t, evalJS[bool](c, `document.getElementById("db-delete").hidden`))
	require.True(t, evalJS[bool](c, `document.querySelector("#db-list tr[data-db=keep]") !== null`))
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
	c.waitJS(cellsJS(`[data-shard="2"][data-role=follower]`) + ` === 2`)

	target := evalJS[string](c, `document.querySelector('#shard-map td[data-shard="2"][data-role=follower]').dataset.node`)
	c.do(chromedp.Click(chromedp.CSS(`#shard-map td[data-shard="2"][data-role=follower]`)))
	c.waitJS(`!document.getElementById("shard-action").hidden`)
	require.Contains(t, evalJS[string](c, `document.getElementById("shard-action").textContent`), "Make "+target+" leader of shard 2")
	c.do(chromedp.Click(chromedp.CSS(`#shard-leader-go`)))

	c.waitJS(fmt.Sprintf(`document.querySelector('#shard-map td[data-shard="2"][data-node=%q]').dataset.role === "leader"`, target))
	require.Equal(t, 1, evalJS[int](c, cellsJS(`[data-shard="2"][data-role=leader]`)))
	require.Contains(t, evalJS[string](c, `document.querySelector('#shard-map tbody tr:nth-child(3) td.info').textContent`), "term 2")
	api.set(func(f *fakeAPI) { require.Equal(t, target, f.dbs["metrics"].shards[2].Leader) })
}

func TestConsoleAdminToken(t *testing.T) {
	api := newFakeAPI(3)
	api.token = "s3cret"
	c := newConsole(t, api)
	c.open("#databases")
	c.waitJS(`document.querySelector("#db-form select[name=storage_cluster] option") !== null`)

	c.do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "guarded"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "2"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	c.waitJS(`!document.getElementById("token-box").hidden`)
	require.Contains(t, evalJS[string](c, `document.getElementById("db-error").textContent`), "admin token")

	c.do(
		chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret"),
		chromedp.Click(chromedp.CSS(`#token-save`)),
	)
	c.waitJS(`document.getElementById("token-box").hidden`)
	require.Equal(t, "s3cret", evalJS[string](c, `localStorage.getItem("cairn.admin_token")`))
	c.do(chromedp.Click(chromedp.CSS(`#db-create`)))
	c.waitJS(`document.querySelector("#db-list tr[data-db=guarded]") !== null`)
	api.set(func(f *fakeAPI) {
		require.Equal(t, []string{"", "Bearer s3cret"}, f.auths)
	})
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
	c.waitJS(cellsJS(``) + ` === 50`)

	got := evalJS[map[string]string](c, `Object.fromEntries([...document.querySelectorAll("#shard-map td[data-shard]")]
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
	require.Equal(t, 1, evalJS[int](c, `document.querySelectorAll("#shard-map tr.offline").length`))
	require.Contains(t, evalJS[string](c, `document.querySelector("#shard-map tr.offline td.info").textContent`), "no replica alive")
	require.Contains(t, evalJS[string](c, `document.getElementById("shard-summary").textContent`), "1 offline · 4 out-of-sync replicas")
}
