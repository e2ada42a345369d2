package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// pageTimeout bounds one browser action or wait. Against a real cluster a
// drain moves replicas through full syncs, so it is longer than the console
// package's own tests allow against their fake API.
const pageTimeout = 60 * time.Second

// newPage starts a fresh Chromium tab for a test against a real cluster.
func newPage(t *testing.T) *browsertest.Page {
	t.Helper()
	return browsertest.New(t,
		browsertest.Timeout(pageTimeout),
		browsertest.PollInterval(50*time.Millisecond),
		browsertest.FinalScreenshot("final"))
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

	core, endpoint := startCore(t)
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

	p.Do(chromedp.Navigate("http://" + core.addr + "/#databases"))
	p.WaitJS(`window.cairnConsole && document.getElementById("etcd-pill").textContent === "etcd up"`)
	p.WaitJS(`[...document.querySelectorAll("#db-form select[name=storage_cluster] option")].some(o => o.value === "default")`)
	p.Do(
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=name]`), "metrics"),
		chromedp.SetValue(chromedp.CSS(`#db-form select[name=storage_cluster]`), "default"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=num_shards]`), "6"),
		chromedp.SetValue(chromedp.CSS(`#db-form input[name=replica_factor]`), "2"),
		chromedp.Click(chromedp.CSS(`#db-create`)),
	)
	p.WaitJS(`document.querySelector("#db-list tr[data-db=metrics]") !== null`)
	require.True(t, browsertest.Eval[bool](p, `document.getElementById("db-error").hidden`),
		"create failed: %s", browsertest.Eval[string](p, `document.getElementById("db-error").textContent`))
	// The API agrees with the page: the form created what it said.
	code, db := core.get("/api/v1/databases/metrics")
	require.Equal(t, 200, code)
	require.Equal(t, 6.0, db["num_shards"])
	require.Equal(t, 2.0, db["replica_factor"])

	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	p.WaitJS(`document.getElementById("shard-db").value === "metrics"`)
	p.WaitJS(mapCells(`[data-role=leader]`) + ` === 6 && ` + mapCells(`[data-role=follower]`) + ` === 6`)
	require.Equal(t, 18, browsertest.Eval[int](p, mapCells(``)), "6 shards x 3 storage nodes")
	p.Screenshot("placed")

	// Drain the node holding the most replicas: its cells must all move.
	victim, most := "", -1
	for _, id := range ids {
		n := browsertest.Eval[int](p, mapCells(fmt.Sprintf(`[data-node=%q]:not([data-role=none])`, id)))
		if n > most {
			victim, most = id, n
		}
	}
	require.Positive(t, most, "no node holds a replica")
	p.Do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#shard-map th[data-node=%q] button.drain`, victim))))
	// The node table (drawn even while another tab shows) counts what the
	// drain still has to move: it starts from the node's replicas.
	p.WaitJS(fmt.Sprintf(`(() => { const b = document.querySelector('#storage-nodes .badge.drain[data-remaining]');
		return b !== null && Number(b.dataset.remaining) <= %d; })()`, most))

	inVictim := mapCells(fmt.Sprintf(`[data-node=%q]:not([data-role=none])`, victim))
	elsewhere := mapCells(fmt.Sprintf(`:not([data-node=%q]):not([data-role=none])`, victim))
	p.WaitJS(inVictim + ` === 0 && ` + elsewhere + ` === 12`)
	p.WaitJS(fmt.Sprintf(`document.querySelector('#shard-map th[data-node=%q].dr button.undrain') !== null`, victim))
	// Replicas that moved finish their full sync: all in sync, one leader each.
	p.WaitJS(mapCells(`[data-role=leader]`) + ` === 6 && ` + mapCells(`[data-role=follower]`) + ` === 6`)
	p.WaitJS(`(document.querySelector('#storage-nodes .badge.drain[data-remaining="0"]') || {}).textContent === "drained"`)
	p.Screenshot("drained")

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

// startCore starts an etcd,master,broker process (lease TTL 2 s, plus extra
// flags), waits until it is master and ready and the storage cluster
// "default" exists, and returns it with its etcd client URL.
func startCore(t *testing.T, extra ...string) (*Proc, string) {
	t.Helper()
	endpoint := freeURL(t)
	args := append([]string{"--role", "etcd,master,broker", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", endpoint, "--etcd-listen-peer-url", freeURL(t), "--lease-ttl", "2s"}, extra...)
	core := start(t, append(args, "--log-format", "json")...)
	masterIs(t, core, nodeID(t, core), 15*time.Second)
	core.waitStatus("/api/v1/ready", 200, 10*time.Second)
	require.Eventually(t, func() bool {
		code, _ := core.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
		return code == 201 || code == 409 // 409: an earlier answer was lost
	}, 15*time.Second, 50*time.Millisecond, "storage cluster default never created")
	return core, endpoint
}
