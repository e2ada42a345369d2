package console

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// progressRow is one row of the replica progress table as the page shows it.
type progressRow struct {
	State string `json:"state"`
	Txn   string `json:"txn"` // data-txn: absent when the replica did not answer
	Lag   string `json:"lag"` // data-lag: absent when unknown
	Text  string `json:"text"`
}

// progressRowsJS reads the table, keyed "shard/node".
const progressRowsJS = `Object.fromEntries([...document.querySelectorAll("#progress tr[data-shard]")].map((tr) =>
	[tr.dataset.shard + "/" + tr.dataset.node, {state: tr.dataset.state, txn: tr.dataset.txn || "", lag: tr.dataset.lag || "",
	 text: [...tr.cells].map((c) => c.textContent).join("|")}]))`

// TestConsoleReplicaProgress: the replica progress under the shard map shows
// what the API answered for every replica: last txn id, lag behind the
// leader (also ahead of it, or unknown when the leader did not answer), and
// marks a replica whose node is live but silent apart from one on a node
// that is down.
func TestConsoleReplicaProgress(t *testing.T) {
	api := newFakeAPI(5)
	db := api.addDB("metrics", "default", 5, 3)
	api.set(func(f *fakeAPI) {
		// shard 0: n-1 n-2 and a replica on n-9, which is not live.
		s0 := db.shards[0]
		s0.Replicas[2], s0.ISR = "n-9", []string{"n-1", "n-2"}
		// shard 1 (n-2 leads, txn 110): n-3 is 7 behind, n-4 2 ahead.
		db.shards[1].txn = map[string]uint64{"n-3": 103, "n-4": 112}
		// n-5 is live but does not answer: a follower of shard 2, the
		// leader of shard 3 (whose followers' lag is then unknown).
		f.silent["n-5"] = true
		db.shards[3].Leader = "n-5"
		// shard 4 (n-5 n-1 n-2) is offline: no lag without a leader.
		s4 := db.shards[4]
		s4.Status, s4.Leader, s4.ISR, s4.Reason = "offline", "", nil, "no replica alive"
	})
	c := newConsole(t, api)
	c.open("#shards/metrics")
	c.WaitJS(`document.querySelectorAll("#progress tr[data-shard]").length === 15`)

	got := browsertest.Eval[map[string]progressRow](c.Page, progressRowsJS)
	// What the page must say, derived from the fake's own state.
	want := map[string][2]string{} // "shard/node" -> state, lag
	api.set(func(f *fakeAPI) {
		views := f.progressLocked(db)
		for _, v := range views {
			lead, leadOK := v.Progress[v.Leader]
			for _, n := range v.Replicas {
				p, ok := v.Progress[n]
				key := fmt.Sprintf("%d/%s", v.ID, n)
				switch {
				case !ok && slices.Contains(f.clusters["default"], n):
					want[key] = [2]string{"no-answer", ""}
				case !ok:
					want[key] = [2]string{"down", ""}
				case v.Status == "offline":
					want[key] = [2]string{"no-leader", ""}
				case !leadOK:
					want[key] = [2]string{"unknown", ""}
				default:
					lag := int64(lead.LastTxnID) - int64(p.LastTxnID)
					state := map[bool]string{true: "behind", false: "in-step"}[lag > 0]
					if lag < 0 {
						state = "ahead"
					}
					want[key] = [2]string{state, fmt.Sprint(lag)}
				}
				if ok {
					require.Equal(t, fmt.Sprint(p.LastTxnID), got[key].Txn, "last txn id of %s", key)
				} else {
					require.Empty(t, got[key].Txn, "%s did not answer, yet a txn id is shown", key)
				}
			}
		}
	})
	require.Len(t, got, len(want))
	for key, w := range want {
		require.Equal(t, w[0], got[key].State, "state of %s: %s", key, got[key].Text)
		require.Equal(t, w[1], got[key].Lag, "lag of %s: %s", key, got[key].Text)
	}
	// The figures as the operator reads them.
	require.Contains(t, got["1/n-3"].Text, "|103|")
	require.Contains(t, got["1/n-3"].Text, "|7|behind")
	require.Contains(t, got["1/n-4"].Text, "|+2|ahead of the leader")
	require.Contains(t, got["2/n-5"].Text, "no answer in 2 s")
	require.Contains(t, got["0/n-9"].Text, "node down")
	require.Contains(t, got["3/n-1"].Text, "leader did not answer")
	require.Contains(t, got["4/n-1"].Text, "no leader")
	summary := browsertest.Eval[string](c.Page, `document.getElementById("progress-summary").textContent`)
	require.Contains(t, summary, "15 replicas · 1 behind (max lag 7) · 3 not answering · 1 on down nodes")
	c.Screenshot("progress")

	// Only the replicas that need a look.
	c.Do(chromedp.SetValue(chromedp.CSS(`#progress-filter`), "behind"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("progress-filter").dispatchEvent(new Event("change"))`))
	c.WaitJS(`document.querySelectorAll("#progress tr[data-shard]").length === 10`)
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll('#progress tr[data-state=in-step]').length`))

	// n-3 catches up; the button asks again at once.
	api.set(func(f *fakeAPI) { db.shards[1].txn["n-3"] = 110 })
	c.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
	c.WaitJS(`document.querySelector('#progress tr[data-shard="1"][data-node="n-3"]') === null`)
	c.Do(chromedp.SetValue(chromedp.CSS(`#progress-filter`), "all"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("progress-filter").dispatchEvent(new Event("change"))`))
	c.WaitJS(`(document.querySelector('#progress tr[data-shard="1"][data-node="n-3"]') || {dataset: {}}).dataset.lag === "0"`)
	api.set(func(f *fakeAPI) {
		require.GreaterOrEqual(t, len(f.progressAsks), 2)
		for _, name := range f.progressAsks {
			require.Equal(t, "metrics", name)
		}
	})
}

// TestConsoleProgressErrorShown: a refused progress question is a message
// naming the cause, never a blank table; an earlier answer stays, dated.
func TestConsoleProgressErrorShown(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("metrics", "default", 2, 2)
	api.progressFail = "progress is asked of the storage nodes by brokers only"
	c := newConsole(t, api)
	c.open("#shards/metrics")
	c.WaitJS(`!document.getElementById("progress-error").hidden`)
	require.Equal(t, "Replica progress of metrics could not be read: progress is asked of the storage nodes by brokers only",
		browsertest.Eval[string](c.Page, `document.getElementById("progress-error").textContent`))
	require.Zero(t, browsertest.Eval[int](c.Page, `document.querySelectorAll("#progress tr").length`))

	api.set(func(f *fakeAPI) { f.progressFail = "" })
	c.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
	c.WaitJS(`document.getElementById("progress-error").hidden && document.querySelectorAll("#progress tr[data-shard]").length === 4`)

	api.set(func(f *fakeAPI) { f.progressFail = "etcd unreachable; retry" })
	c.Do(chromedp.Click(chromedp.CSS(`#progress-refresh`)))
	c.WaitJS(`!document.getElementById("progress-error").hidden`)
	msg := browsertest.Eval[string](c.Page, `document.getElementById("progress-error").textContent`)
	require.Contains(t, msg, "could not be read: etcd unreachable; retry (showing the answer of ")
	require.Equal(t, 4, browsertest.Eval[int](c.Page, `document.querySelectorAll("#progress tr[data-shard]").length`))
	c.Screenshot("progress-error")
}

// TestConsoleProgressOnlyWhileShown: progress is asked for the database on
// screen only, and never while another tab is open, so a console left open
// costs the storage nodes nothing.
func TestConsoleProgressOnlyWhileShown(t *testing.T) {
	api := newFakeAPI(3)
	api.addDB("a", "default", 2, 2)
	api.addDB("b", "default", 3, 2)
	c := newConsole(t, api)
	c.open("#overview")
	waitPolls := func(n int) {
		t.Helper()
		var start int
		api.set(func(f *fakeAPI) { start = f.nodePolls })
		require.Eventually(t, func() bool {
			var now int
			api.set(func(f *fakeAPI) { now = f.nodePolls })
			return now >= start+n
		}, 20*time.Second, 20*time.Millisecond)
	}
	asks := func() []string {
		var out []string
		api.set(func(f *fakeAPI) { out = slices.Clone(f.progressAsks) })
		return out
	}
	waitPolls(3)
	require.Empty(t, asks(), "progress asked while the shard map was not shown")
	require.False(t, browsertest.Eval[bool](c.Page, `window.cairnConsole.progressScheduled()`))

	c.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=shards]`)))
	c.WaitJS(`document.querySelectorAll("#progress tr[data-shard]").length === 4`)
	require.Equal(t, []string{"a"}, asks())
	require.True(t, browsertest.Eval[bool](c.Page, `window.cairnConsole.progressScheduled()`), "auto refresh is on")
	// The auto refresh asks again, for the same database.
	require.Eventually(t, func() bool { return len(asks()) >= 2 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"a", "a"}, asks()[:2])

	c.Do(chromedp.SetValue(chromedp.CSS(`#shard-db`), "b"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("shard-db").dispatchEvent(new Event("change"))`))
	c.WaitJS(`document.querySelectorAll("#progress tr[data-shard]").length === 6`)
	require.Equal(t, "b", asks()[len(asks())-1])

	// Auto off: nothing is due until the button.
	c.Do(chromedp.Click(chromedp.CSS(`#progress-auto`)))
	require.False(t, browsertest.Eval[bool](c.Page, `window.cairnConsole.progressScheduled()`))
	c.Do(chromedp.Click(chromedp.CSS(`#progress-auto`)))
	require.True(t, browsertest.Eval[bool](c.Page, `window.cairnConsole.progressScheduled()`))

	c.Do(chromedp.Click(chromedp.CSS(`#tabs a[data-tab=databases]`)))
	c.WaitJS(`!window.cairnConsole.progressScheduled()`)
	n := len(asks())
	waitPolls(3)
	require.Len(t, asks(), n, "progress asked while the shard map was not shown")
	require.False(t, browsertest.Eval[bool](c.Page, `window.cairnConsole.progressScheduled()`))
}
