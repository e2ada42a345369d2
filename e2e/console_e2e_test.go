package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// pageTimeout bounds one browser action or wait. Against a real cluster a
// drain moves replicas through full syncs, so it is longer than the console
// package's own tests allow against their fake API.
const pageTimeout = 60 * time.Second

// page is a headless Chromium tab driven by chromedp. Uncaught JavaScript
// exceptions fail the test even when the page happens to look right.
type page struct {
	t         *testing.T
	ctx       context.Context
	artifacts string // directory for PNG screenshots

	mu         sync.Mutex
	exceptions []string
}

// newPage starts a fresh Chromium with its own profile. It fails (never
// skips) when Chromium is missing: CI installs it, and a console no test has
// rendered against a real cluster must not ship.
func newPage(t *testing.T) *page {
	t.Helper()
	path := os.Getenv("CAIRN_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("headless Chromium not found at %s (%v): install it (apt-get install -y chromium) or set CAIRN_CHROMIUM", path, err)
	}
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
	// The first action starts the browser; a timeout on it would end the
	// browser with it.
	require.NoError(t, chromedp.Do(ctx), "start Chromium at %s", path)
	p := &page{t: t, ctx: ctx, artifacts: os.Getenv("CAIRN_ARTIFACTS")}
	if p.artifacts == "" {
		p.artifacts = t.TempDir()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.IsException() {
				p.mu.Lock()
				p.exceptions = append(p.exceptions, m.String())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
	})
	// Cleanups run last-registered first: the final screenshot is taken
	// while the browser still runs, showing the page a failure left.
	t.Cleanup(func() { p.screenshot("final") })
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		require.Empty(t, p.exceptions, "JavaScript exceptions in the console")
	})
	return p
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	require.NoError(p.t, chromedp.Do(ctx, actions...))
}

// waitJS waits until the JavaScript expression is truthy.
func (p *page) waitJS(expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(pageTimeout)))
		// Right after a navigation the poll may run in the old page's
		// context for a moment; it then runs again in the new one.
		if err != nil && strings.Contains(err.Error(), "Cannot find context with specified id") && ctx.Err() == nil {
			continue
		}
		require.NoError(p.t, err, "waiting for %s", expr)
		return
	}
}

func evalOn[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(p.t, err, "evaluating %s", expr)
	return v
}

var artifactName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// screenshot saves the page as <test>-<suffix>.png in $CAIRN_ARTIFACTS
// (default: the test's temp dir).
func (p *page) screenshot(suffix string) {
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot: %v", err)
		return
	}
	file := filepath.Join(p.artifacts, artifactName.ReplaceAllString(p.t.Name()+"-"+suffix, "_")+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Errorf("write screenshot: %v", err)
		return
	}
	p.t.Logf("screenshot: %s", file)
}

// mapCells counts shard-map cells matching a CSS selector suffix.
func mapCells(sel string) string {
	return fmt.Sprintf(`document.querySelectorAll(%q).length`, "#shard-map td[data-shard]"+sel)
}

// TestConsoleAgainstRealCluster drives the console served by a real broker:
// a database created through the form is placed on real storage nodes, and
// the drain button empties a node's column of the shard map.
func TestConsoleAgainstRealCluster(t *testing.T) {
	p := newPage(t) // first: without Chromium nothing else is worth starting

	core := start(t, "--role", "etcd,master,broker", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", freeURL(t), "--etcd-listen-peer-url", freeURL(t), "--lease-ttl", "2s", "--log-format", "json")
	masterIs(t, core, nodeID(t, core), 15*time.Second)
	core.waitStatus("/api/v1/ready", 200, 10*time.Second)
	var endpoint string
	for i, a := range core.args {
		if a == "--etcd-listen-client-url" {
			endpoint = core.args[i+1]
		}
	}
	require.Eventually(t, func() bool {
		code, _ := core.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
		return code == 201 || code == 409 // 409: an earlier answer was lost
	}, 15*time.Second, 50*time.Millisecond, "storage cluster default never created")
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = nodeID(t, startNode(t, "storage", endpoint))
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			code, c := core.get("/api/v1/storage-clusters/default")
			return code == 200 && containsNode(c["nodes"], id)
		}, 15*time.Second, 20*time.Millisecond, "storage node %s never showed up live", id)
	}

	p.do(chromedp.Navigate("http://" + core.addr + "/#databases"))
	p.waitJS(`window.cairnConsole && document.getElementById("etcd-pill").textContent === "etcd up"`)
	p.waitJS(`[...document.querySelectorAll("#db-form select[name=storage_cluster] option")].some(o => o.value === "default")`)
	p.do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "metrics"),
		chromedp.SetValue(chromedp.CSS(`#db-form select[name=storage_cluster]`), "default"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=num_shards]`), "6"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "2"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	p.waitJS(`document.querySelector("#db-list tr[data-db=metrics]") !== null`)
	require.True(t, evalOn[bool](p, `document.getElementById("db-error").hidden`),
		"create failed: %s", evalOn[string](p, `document.getElementById("db-error").textContent`))
	// The API agrees with the page: the form created what it said.
	code, db := core.get("/api/v1/databases/metrics")
	require.Equal(t, 200, code)
	require.Equal(t, 6.0, db["num_shards"])
	require.Equal(t, 2.0, db["replica_factor"])

	p.do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	p.waitJS(`document.getElementById("shard-db").value === "metrics"`)
	p.waitJS(mapCells(`[data-role=leader]`) + ` === 6 && ` + mapCells(`[data-role=follower]`) + ` === 6`)
	require.Equal(t, 18, evalOn[int](p, mapCells(``)), "6 shards x 3 storage nodes")
	p.screenshot("placed")

	// Drain the node holding the most replicas: its cells must all move.
	victim, most := "", -1
	for _, id := range ids {
		n := evalOn[int](p, mapCells(fmt.Sprintf(`[data-node=%q]:not([data-role=none])`, id)))
		if n > most {
			victim, most = id, n
		}
	}
	require.Positive(t, most, "no node holds a replica")
	p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#shard-map th[data-node=%q] button.drain`, victim))))

	inVictim := mapCells(fmt.Sprintf(`[data-node=%q]:not([data-role=none])`, victim))
	elsewhere := mapCells(fmt.Sprintf(`:not([data-node=%q]):not([data-role=none])`, victim))
	p.waitJS(inVictim + ` === 0 && ` + elsewhere + ` === 12`)
	p.waitJS(fmt.Sprintf(`document.querySelector('#shard-map th[data-node=%q].dr button.undrain') !== null`, victim))
	// Replicas that moved finish their full sync: all in sync, one leader each.
	p.waitJS(mapCells(`[data-role=leader]`) + ` === 6 && ` + mapCells(`[data-role=follower]`) + ` === 6`)
	p.screenshot("drained")

	// The API agrees: no replica and no leadership left on the drained node.
	code, body := core.get("/api/v1/databases/metrics/shards")
	require.Equal(t, 200, code)
	list, _ := body["shards"].([]any)
	require.Len(t, list, 6)
	for _, it := range list {
		s, _ := it.(map[string]any)
		require.NotContains(t, s["replicas"], victim, "shard %v", s["id"])
		require.NotEqual(t, victim, s["leader"], "shard %v", s["id"])
		require.Len(t, s["replicas"], 2, "shard %v", s["id"])
		require.Equal(t, "online", s["status"], "shard %v", s["id"])
	}
}
