package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/web/console/browsertest"
	"github.com/chromedp/chromedp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// scrape reads a node's /metrics; nil when it does not answer.
func scrape(t testing.TB, p *Proc) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := p.client.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	return fams
}

// metric sums the series of a family whose labels include the pairs given
// as "name=value"; -1 when the node does not answer or has no such family.
func metric(t testing.TB, p *Proc, name string, labels ...string) float64 {
	t.Helper()
	fams := scrape(t, p)
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		match := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// waitMetric waits until cond holds for the metric's value.
func waitMetric(t testing.TB, p *Proc, within time.Duration, cond func(float64) bool, what string, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond) // a scrape per tick, as require.Eventually polls
	defer tick.Stop()
	for {
		v = metric(t, p, name, labels...)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("%s: %s%v never %s within %s (last %v)", p.name, name, labels, what, within, v))
		}
		<-tick.C
	}
}

func above(x float64) func(float64) bool { return func(v float64) bool { return v > x } }
func equal(x float64) func(float64) bool { return func(v float64) bool { return v == x } }

// TestMetricsMove drives a real cluster (a master+broker with its etcd, two
// storage nodes) through writes, queries, a kill -9 and a restart, and
// watches each named metric move on the node that serves it: write and query
// counters and histograms, replicas and leaders per node, failovers and
// leader changes, offline and under-replicated shards, in-sync gaps and
// follower lag, live storage nodes.
func TestMetricsMove(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 2, shards: 4, rf: 2})
	code, body := c.broker.post("/api/v1/databases", map[string]any{"name": "one", "num_shards": 4, "replica_factor": 1})
	require.Equal(t, 201, code, "%v", body)
	b := c.broker
	waitMetric(t, b, 15*time.Second, equal(0), "0", "cairn_cluster_shards_offline", "database=one")
	require.Equal(t, 1.0, metric(t, b, "cairn_master_is_master"))
	require.Greater(t, metric(t, b, "cairn_master_term"), 0.0)
	require.Equal(t, 1.0, metric(t, b, "cairn_build_info"))
	require.Equal(t, 2.0, metric(t, b, "cairn_cluster_storage_nodes", "cluster=default"))
	require.Greater(t, metric(t, b, "cairn_etcd_request_duration_seconds", "operation=txn"), 0.0)

	client := &http.Client{Timeout: 15 * time.Second}
	write := func(db string, n int) {
		t.Helper()
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, "m,host=h%d v=%d %d\n", i, i, time.Now().UnixNano())
		}
		code, msg, err := postData(client, "http://"+b.addr+"/api/v1/write?db="+db, []byte(sb.String()))
		require.NoError(t, err)
		require.Equal(t, 204, code, msg)
	}
	write("db", 50)
	write("one", 50)
	require.Equal(t, 50.0, metric(t, b, "cairn_broker_write_points_total", "database=db", "status=204"))
	require.Equal(t, 1.0, metric(t, b, "cairn_broker_write_requests_total", "database=one", "status=204"))
	require.Greater(t, metric(t, b, "cairn_broker_write_bytes_total", "database=one"), 500.0)
	require.Equal(t, 2.0, metric(t, b, "cairn_broker_write_duration_seconds"))
	require.Equal(t, 0.0, metric(t, b, "cairn_broker_query_duration_seconds"))
	c.queryAll("m", 10*time.Second)
	require.Equal(t, 1.0, metric(t, b, "cairn_broker_query_duration_seconds"))
	require.Equal(t, 1.0, metric(t, b, "cairn_broker_query_requests_total", "database=db", "status=200"))
	stored, leaders, replicas := 0.0, 0.0, 0.0
	for _, s := range c.storage {
		stored += metric(t, s, "cairn_storage_write_points_total")
		leaders += metric(t, s, "cairn_storage_replicas", "role=leader")
		replicas += metric(t, s, "cairn_storage_replicas")
	}
	require.Equal(t, 100.0, stored, "every point written once by its shard leader")
	require.Equal(t, 8.0, leaders, "4 + 4 shards")
	require.Equal(t, 12.0, replicas, "4 x 2 + 4 x 1 replicas")

	// kill -9 the node leading most of db's shards.
	victim, _ := c.busiestLeader()
	survivor := c.ids[0]
	if survivor == victim {
		survivor = c.ids[1]
	}
	sp := c.proc(survivor)
	var one struct {
		Shards []dataShard `json:"shards"`
	}
	require.Equal(t, 200, getDataJSON(b, "/api/v1/databases/one/shards", &one))
	survivorOnes := 0
	for _, s := range one.Shards {
		if s.Leader == survivor {
			survivorOnes++
		}
	}
	require.Zero(t, metric(t, b, "cairn_master_failovers_total", "result=new_leader"))
	changes := metric(t, b, "cairn_master_leader_changes_total")
	c.proc(victim).kill9()

	waitMetric(t, b, 15*time.Second, above(0), "> 0", "cairn_master_failovers_total", "result=new_leader")
	waitMetric(t, b, 15*time.Second, above(0), "> 0", "cairn_master_failovers_total", "result=offline")
	waitMetric(t, b, 15*time.Second, above(0), "> 0", "cairn_cluster_shards_offline", "database=one")
	waitMetric(t, b, 15*time.Second, equal(0), "0", "cairn_cluster_shards_offline", "database=db")
	waitMetric(t, b, 15*time.Second, equal(4), "4", "cairn_cluster_shards_under_replicated", "database=db")
	waitMetric(t, b, 15*time.Second, equal(1), "1", "cairn_cluster_storage_nodes", "cluster=default")
	require.Greater(t, metric(t, b, "cairn_master_leader_changes_total"), changes)
	waitMetric(t, sp, 15*time.Second, equal(float64(4+survivorOnes)), "all of db's shards and its own of one", "cairn_storage_replicas", "role=leader")
	// Writes after the kill: the survivor leads every db shard; the dead
	// follower misses them and lags.
	write("db", 20)
	waitMetric(t, sp, 15*time.Second, above(0), "> 0", "cairn_storage_follower_lag_entries", "follower="+victim)
	waitMetric(t, sp, 15*time.Second, above(0), "> 0", "cairn_storage_follower_lag_seconds", "follower="+victim)
	waitMetric(t, sp, 15*time.Second, equal(4), "4", "cairn_storage_insync_replicas_missing")

	// The node returns: its RF1 shards come back online, it catches up and
	// rejoins every in-sync set.
	changes = metric(t, b, "cairn_master_leader_changes_total")
	c.proc(victim).restart()
	waitMetric(t, b, 30*time.Second, equal(0), "0", "cairn_cluster_shards_offline", "database=one")
	waitMetric(t, b, 30*time.Second, equal(0), "0", "cairn_cluster_shards_under_replicated", "database=db")
	waitMetric(t, b, 15*time.Second, equal(2), "2", "cairn_cluster_storage_nodes", "cluster=default")
	require.Greater(t, metric(t, b, "cairn_master_leader_changes_total"), changes, "recovered shards got leaders")
	waitMetric(t, sp, 15*time.Second, equal(0), "0", "cairn_storage_insync_replicas_missing")
	waitMetric(t, sp, 15*time.Second, equal(0), "0", "cairn_storage_follower_lag_seconds", "follower="+victim)
	write("one", 10)
	require.Equal(t, 60.0, metric(t, b, "cairn_broker_write_points_total", "database=one", "status=204"))
}

// TestChartsAfterWriteLoad: a standalone node sampling every second, under
// 30 s of writes, draws the write and shard charts with that data (read
// from uPlot's own data on the page, not just the chart's presence).
func TestChartsAfterWriteLoad(t *testing.T) {
	p := newPage(t)
	n := start(t, "--role", "standalone", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", freeURL(t), "--etcd-listen-peer-url", freeURL(t),
		"--lease-ttl", "2s", "--log-format", "json", "--history-interval", "1s")
	n.waitStatus("/api/v1/ready", 200, 15*time.Second)
	require.Eventually(t, func() bool {
		code, _ := n.post("/api/v1/databases", map[string]any{"name": "load", "num_shards": 4, "replica_factor": 1})
		return code == 201 || code == 409
	}, 15*time.Second, 50*time.Millisecond)

	// 30 s of writes: 100 points every 100 ms.
	client := &http.Client{Timeout: 10 * time.Second}
	var mu sync.Mutex
	acked := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		end := time.After(30 * time.Second)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-end:
				return
			case <-tick.C:
			}
			var sb strings.Builder
			for h := range 100 {
				fmt.Fprintf(&sb, "cpu,host=h%d v=%d %d\n", h, i, time.Now().UnixNano())
			}
			if code, _, err := postData(client, "http://"+n.addr+"/api/v1/write?db=load", []byte(sb.String())); err == nil && code == 204 {
				mu.Lock()
				acked++
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	p.Do(chromedp.Navigate("http://" + n.addr + "/#charts"))
	p.WaitJS(`window.cairnCharts && window.cairnCharts.polls > 0`)
	<-done
	mu.Lock()
	require.Greater(t, acked, 100, "the load wrote")
	mu.Unlock()

	// Every chart value the page holds, per series, for this node.
	values := func(key string) string {
		return fmt.Sprintf(`(window.cairnCharts.plots[%q] ? window.cairnCharts.plots[%q].data[1] : []).filter(v => v !== null)`, key, key)
	}
	p.WaitJS(values("write_points_per_s") + `.filter(v => v > 0).length >= 20`)
	p.WaitJS(values("stored_points_per_s") + `.filter(v => v > 0).length >= 20`)
	p.WaitJS(values("write_p99_seconds") + `.filter(v => v > 0).length >= 20`)
	p.WaitJS(values("leaders") + `.some(v => v === 4)`)
	peak := browsertest.Eval[float64](p, `Math.max(...`+values("write_points_per_s")+`)`)
	require.Greater(t, peak, 300.0, "about 1,000 points/s were written")
	require.Less(t, peak, 5000.0)
	require.Equal(t, "1", browsertest.Eval[string](p, `document.getElementById("chart-write_points_per_s").dataset.nodes`))
	require.True(t, browsertest.Eval[bool](p, `document.querySelector("#chart-write_points_per_s canvas").width > 0`))
	p.Screenshot("charts")
}
