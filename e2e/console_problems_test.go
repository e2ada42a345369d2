package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// problemJS is true when the Overview's problems summary lists a problem of
// kind with the given attribute (data-node or data-db) value.
func problemJS(kind, attr, value string) string {
	return fmt.Sprintf(`document.querySelector('#problems li[data-kind=%q][data-%s=%q]') !== null`, kind, attr, value)
}

// leaderSpread is max - min of the online shards led per live storage node.
func leaderSpread(t *testing.T, core *Proc, live []string, dbs ...string) int {
	t.Helper()
	leads := map[string]int{}
	for _, id := range live {
		leads[id] = 0
	}
	for _, db := range dbs {
		code, body := core.get("/api/v1/databases/" + db + "/shards")
		require.Equal(t, 200, code)
		for _, it := range body["shards"].([]any) {
			s := it.(map[string]any)
			if s["status"] == "online" {
				leads[s["leader"].(string)]++
			}
		}
	}
	lo, hi := 1<<30, -1
	for _, n := range leads {
		lo, hi = min(lo, n), max(hi, n)
	}
	return hi - lo
}

// TestConsoleProblemsAndRebalance: on a real cluster of three storage nodes,
// kill -9 one. The Overview's problems summary names it down and the
// databases that lost replicas, the node table keeps it as "down since", the
// Databases page shows their health, and the shard map never shows it in
// sync. It comes back: the problems clear. It leads almost nothing then; the
// rebalance button shows the dry-run plan, runs it once confirmed, and the
// leaders end balanced.
func TestConsoleProblemsAndRebalance(t *testing.T) {
	p := newPage(t)

	// Replicas never move by themselves during the test: what the console
	// shows is the failure and its repair, not a re-placement.
	core, endpoint := startCore(t, "--rebalance-delay", "1h")
	nodes := make([]*Proc, 3)
	ids := make([]string, 3)
	for i := range nodes {
		nodes[i] = startNode(t, "storage", endpoint)
		ids[i] = nodeID(t, nodes[i])
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			code, c := core.get("/api/v1/storage-clusters/default")
			return code == 200 && containsNode(c["nodes"], id)
		}, 15*time.Second, 20*time.Millisecond)
	}
	for _, db := range []map[string]any{
		{"name": "metrics", "num_shards": 12, "replica_factor": 2},
		{"name": "scratch", "num_shards": 3, "replica_factor": 1},
	} {
		code, body := core.post("/api/v1/databases", db)
		require.Equal(t, 201, code, "%v", body)
	}

	p.Do(chromedp.Navigate("http://" + core.addr + "/#shards/metrics"))
	p.WaitJS(`window.cairnConsole && document.getElementById("shard-db").value === "metrics"`)
	p.WaitJS(mapCells(`[data-role=leader]`) + ` === 12 && ` + mapCells(`[data-role=follower]`) + ` === 12`)
	p.WaitJS(`document.querySelector("#problems .all-ok") !== null && document.title === "Cairn console"`)

	// Record, on every change of the shard map, whether a column marked
	// down still has a cell drawn in sync (leader or follower).
	victim := ids[0]
	p.Do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		window.__inSyncWhileDown = 0;
		const check = () => {
			if (!document.querySelector('#shard-map th.gone[data-node=%[1]q]')) return;
			window.__inSyncWhileDown += document.querySelectorAll(
				'#shard-map td[data-node=%[1]q][data-role=leader], #shard-map td[data-node=%[1]q][data-role=follower]').length;
		};
		new MutationObserver(check).observe(document.getElementById("shard-map"), {subtree: true, childList: true, attributes: true});
	})()`, victim)))

	killed := time.Now()
	nodes[0].kill9()
	p.WaitJS(fmt.Sprintf(`document.querySelector('#shard-map th.gone[data-node=%q]') !== null`, victim))
	p.WaitJS(mapCells(fmt.Sprintf(`[data-node=%q][data-role=down]`, victim)) + ` > 0`)
	require.Zero(t, browsertest.Eval[int](p, mapCells(fmt.Sprintf(`[data-node=%q][data-role=leader], #shard-map td[data-node=%q][data-role=follower]`, victim, victim))),
		"the dead node is drawn in sync")
	p.Screenshot("shardmap-node-down")
	t.Logf("shard map while %s is down: %s", victim, browsertest.Eval[string](p, `document.getElementById("shard-summary").textContent`))

	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=overview]`)))
	p.WaitJS(problemJS("node_down", "node", victim))
	t.Logf("kill -9 to the Overview naming %s down: %s (lease TTL 2s)", victim, time.Since(killed).Round(10*time.Millisecond))
	p.WaitJS(problemJS("under_replicated", "db", "metrics"))
	msg := browsertest.Eval[string](p, fmt.Sprintf(`document.querySelector('#problems li[data-kind=node_down][data-node=%q]').textContent`, victim))
	require.Contains(t, msg, "down since")
	require.Contains(t, msg, "critical")
	require.True(t, browsertest.Eval[bool](p, `/^\(\d+\) Cairn console$/.test(document.title)`), "tab title carries the problem count")
	p.WaitJS(fmt.Sprintf(`(document.querySelector('#storage-nodes tr.down[data-down=%q]') || {}).textContent?.includes("down since")`, victim))
	p.Screenshot("overview-problems")
	// The scratch shard held by the victim alone has no replica left.
	code, body := core.get("/api/v1/databases/scratch/shards")
	require.Equal(t, 200, code)
	victimHeldScratch := false
	for _, it := range body["shards"].([]any) {
		if s := it.(map[string]any); s["replicas"].([]any)[0] == victim {
			victimHeldScratch = true
		}
	}
	if victimHeldScratch {
		p.WaitJS(problemJS("shards_offline", "db", "scratch"))
	}

	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=databases]`)))
	p.WaitJS(`document.querySelector('#db-list tr[data-db=metrics] td[data-health=warning], #db-list tr[data-db=metrics] td[data-health=critical]') !== null`)
	p.Screenshot("databases-health")

	// The node returns: the problems clear.
	nodes[0].restart()
	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=overview]`)))
	for _, kind := range []string{"node_down", "shards_offline", "under_replicated", "followers_lagging"} {
		p.WaitJS(fmt.Sprintf(`document.querySelector('#problems li[data-kind=%q]') === null && document.getElementById("problems").childElementCount > 0`, kind))
	}
	p.WaitJS(fmt.Sprintf(`document.querySelector('#storage-nodes tr.down[data-down=%q]') === null`, victim))
	p.Screenshot("overview-recovered")
	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	p.WaitJS(mapCells(`[data-role=leader]`) + ` === 12 && ` + mapCells(`[data-role=follower]`) + ` === 12`)
	require.Zero(t, browsertest.Eval[int](p, `window.__inSyncWhileDown`), "the shard map drew the dead node in sync")
	p.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=overview]`)))

	// Rebalance: the dry run shows the plan, nothing moves until confirmed.
	before := leaderSpread(t, core, ids, "metrics", "scratch")
	t.Logf("leaders per node %d apart before the rebalance", before)
	p.Do(chromedp.Click(chromedp.CSS(`#rebalance`)))
	p.WaitJS(`!document.getElementById("rebalance-plan").hidden`)
	p.Screenshot("rebalance-dry-run")
	if before <= 1 {
		// Failover happened to leave the leaders balanced: the plan moves no leader.
		require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('#rebalance-plan li[data-kind=leader]').length`))
		return
	}
	leaderMoves := browsertest.Eval[int](p, `document.querySelectorAll('#rebalance-plan li[data-kind=leader]').length`)
	require.Positive(t, leaderMoves, "leaders are %d apart, yet the plan moves none", before)
	require.Equal(t, before, leaderSpread(t, core, ids, "metrics", "scratch"), "a dry run moved leaders")
	p.Do(chromedp.Click(chromedp.CSS(`#rebalance-go`)))
	p.WaitJS(`document.getElementById("rebalance-plan").hidden && document.getElementById("notice").textContent.startsWith("Rebalance started")`)
	require.Eventually(t, func() bool { return leaderSpread(t, core, ids, "metrics", "scratch") <= 1 },
		pageTimeout, 100*time.Millisecond, "leaders never balanced after the rebalance")
	p.WaitJS(`document.querySelector('#problems li[data-kind=leader_imbalance]') === null`)
	p.Screenshot("rebalanced")
}
