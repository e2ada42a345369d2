package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// pageProgressJS reads the console's replica progress table: "shard/node"
// -> "state txn lag" (txn and lag empty when unknown).
const pageProgressJS = `Object.fromEntries([...document.querySelectorAll("#progress tr[data-shard]")].map((tr) =>
	[tr.dataset.shard + "/" + tr.dataset.node, tr.dataset.state + " " + (tr.dataset.txn || "") + " " + (tr.dataset.lag || "")]))`

// apiProgress asks the broker for the replica progress of db and returns it
// in the page's form ("shard/node" -> "state txn lag"), the state being one
// of in-step, behind, ahead, unknown (the leader did not answer) and
// no-answer (every node here is live).
func apiProgress(t *testing.T, core *Proc, db string) map[string]string {
	t.Helper()
	code, body := core.get("/api/v1/databases/" + db + "/shards?progress=true")
	require.Equal(t, 200, code, "%v", body)
	out := map[string]string{}
	for _, it := range body["shards"].([]any) {
		s := it.(map[string]any)
		prog, _ := s["progress"].(map[string]any)
		txn := func(n string) (uint64, bool) {
			p, ok := prog[n].(map[string]any)
			if !ok {
				return 0, false
			}
			return uint64(p["last_txn_id"].(float64)), true
		}
		lead, leadOK := txn(fmt.Sprint(s["leader"]))
		for _, r := range s["replicas"].([]any) {
			n := r.(string)
			key := fmt.Sprintf("%v/%s", s["id"], n)
			mine, ok := txn(n)
			switch {
			case !ok:
				out[key] = "no-answer  "
			case !leadOK:
				out[key] = fmt.Sprintf("unknown %d ", mine)
			default:
				lag := int64(lead) - int64(mine)
				state := "in-step"
				if lag > 0 {
					state = "behind"
				} else if lag < 0 {
					state = "ahead"
				}
				out[key] = fmt.Sprintf("%s %d %d", state, mine, lag)
			}
		}
	}
	return out
}

// TestConsoleReplicaProgressAgainstRealCluster: on a real cluster of three
// storage nodes with points written, the console's replica progress shows
// every replica's last txn id and lag as the broker's API answers them
// (asked of the nodes). A storage node frozen with SIGSTOP (still live: its
// lease outlasts the test) shows as not answering.
func TestConsoleReplicaProgressAgainstRealCluster(t *testing.T) {
	p := newPage(t)

	core, endpoint := startCore(t, "--rebalance-delay", "1h")
	// The node frozen below keeps a long lease: frozen, it stays live, so
	// the broker asks it and gets no answer (rather than skipping it as down).
	frozen := start(t, "--role", "storage", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-endpoints", endpoint, "--lease-ttl", "60s", "--log-format", "json")
	ids := []string{nodeID(t, frozen), nodeID(t, startNode(t, "storage", endpoint)), nodeID(t, startNode(t, "storage", endpoint))}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			code, c := core.get("/api/v1/storage-clusters/default")
			return code == 200 && containsNode(c["nodes"], id)
		}, 15*time.Second, 20*time.Millisecond)
	}
	code, body := core.post("/api/v1/databases", map[string]any{"name": "metrics", "num_shards": 4, "replica_factor": 2})
	require.Equal(t, 201, code, "%v", body)

	// Points on every shard's series space: writes are acknowledged once
	// durable on every in-sync replica.
	url := "http://" + core.addr + "/api/v1/write?db=metrics"
	for batch := range 3 {
		var sb strings.Builder
		for h := range 24 {
			fmt.Fprintf(&sb, "cpu,host=h%d v=%d %d\n", h, batch, 1700000000000000000+int64(batch)*1e9)
		}
		require.Eventually(t, func() bool {
			code, _, err := postData(core.client, url, []byte(sb.String()))
			return err == nil && code == 204
		}, 30*time.Second, 50*time.Millisecond, "batch %d never acknowledged", batch)
	}

	p.Do(chromedp.Navigate("http://" + core.addr + "/#shards/metrics"))
	p.WaitJS(`window.cairnConsole && document.getElementById("shard-db").value === "metrics"`)
	p.WaitJS(`document.querySelectorAll("#progress tr[data-shard]").length === 8`)

	// The page shows what the API answers; at rest, once every follower
	// has applied the last write, both stay put and meet.
	var page, api map[string]string
	require.Eventually(t, func() bool {
		api = apiProgress(t, core, "metrics")
		for _, v := range api {
			if !strings.HasPrefix(v, "in-step ") {
				return false
			}
		}
		p.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
		p.WaitJS(`!document.getElementById("progress-refresh").disabled`)
		page = browsertest.Eval[map[string]string](p, pageProgressJS)
		return fmt.Sprint(page) == fmt.Sprint(api)
	}, pageTimeout, 100*time.Millisecond, "page %v, API %v", page, api)
	var written uint64
	for key, v := range page {
		var state string
		var txn uint64
		_, err := fmt.Sscanf(v, "%s %d", &state, &txn)
		require.NoError(t, err, "%s: %q", key, v)
		require.Equal(t, "in-step", state, key)
		written += txn
	}
	require.Positive(t, written, "no replica shows a written txn: %v", page)
	summary := browsertest.Eval[string](p, `document.getElementById("progress-summary").textContent`)
	t.Logf("replica progress (state txn lag): %v; %s", page, summary)
	require.Contains(t, summary, "8 replicas · 0 behind · 0 not answering")
	p.Screenshot("progress")

	// Frozen: live (its lease holds) but silent. Its rows say so.
	frozen.stop()
	mine := fmt.Sprintf(`#progress tr[data-node=%q]`, ids[0])
	require.Positive(t, browsertest.Eval[int](p, `document.querySelectorAll('`+mine+`').length`), "the frozen node holds no replica")
	require.Eventually(t, func() bool {
		p.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
		p.WaitJS(`!document.getElementById("progress-refresh").disabled`)
		return browsertest.Eval[bool](p, `[...document.querySelectorAll('`+mine+`')].every((tr) => tr.dataset.state === "no-answer")`)
	}, pageTimeout, 100*time.Millisecond, "the frozen node's replicas never showed as not answering")
	require.Contains(t, browsertest.Eval[string](p, `document.querySelector('`+mine+`').textContent`), "no answer in 2 s")
	require.NotContains(t, browsertest.Eval[string](p, `document.getElementById("progress-summary").textContent`), " 0 not answering")
	// The API agrees, and the shard map still draws the node live.
	for key, v := range apiProgress(t, core, "metrics") {
		if strings.HasSuffix(key, "/"+ids[0]) {
			require.Equal(t, "no-answer  ", v, key)
		}
	}
	require.Zero(t, browsertest.Eval[int](p, mapCells(fmt.Sprintf(`[data-node=%q][data-role=down]`, ids[0]))))
	t.Logf("with %s frozen: %s", ids[0], browsertest.Eval[string](p, `document.getElementById("progress-summary").textContent`))
	p.Screenshot("progress-frozen")

	frozen.cont()
	require.Eventually(t, func() bool {
		p.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
		p.WaitJS(`!document.getElementById("progress-refresh").disabled`)
		return browsertest.Eval[int](p, `document.querySelectorAll('#progress tr[data-state=no-answer]').length`) == 0
	}, pageTimeout, 100*time.Millisecond, "the thawed node's replicas never answered again")
}
