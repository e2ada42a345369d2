package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
)

// testCluster is a standalone node plus a storage-only node in this process,
// on free loopback ports: enough for every metric to have a series (a shard
// with a follower, writes, queries).
type testCluster struct {
	t    *testing.T
	core *App
	peer *App
}

func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)) }

func startApp(t *testing.T, cfg config.Config) *App {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = freeAddr(t)
	cfg.LeaseTTL = 2 * time.Second
	cfg.Version = "test"
	require.NoError(t, cfg.Validate())
	a, err := Start(cfg, zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(a.Stop)
	return a
}

func startTestCluster(t *testing.T, mutate func(*config.Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	cfg := config.Default()
	cfg.EtcdListenClientURL = "http://" + freeAddr(t)
	cfg.EtcdListenPeerURL = "http://" + freeAddr(t)
	if mutate != nil {
		mutate(&cfg)
	}
	c.core = startApp(t, cfg)
	peer := config.Default()
	peer.Roles, peer.Standalone = []string{config.RoleStorage}, false
	peer.EtcdEndpoints = []string{cfg.EtcdListenClientURL}
	if mutate != nil {
		mutate(&peer)
	}
	c.peer = startApp(t, peer)
	require.Eventually(t, func() bool {
		var nodes struct {
			Storage map[string][]json.RawMessage `json:"storage"`
		}
		return c.getJSON(c.core, "/api/v1/nodes", &nodes) == 200 && len(nodes.Storage["default"]) == 2
	}, 30*time.Second, 20*time.Millisecond, "both storage nodes live")
	return c
}

func (c *testCluster) do(a *App, method, path string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://"+a.HTTPAddr()+path, bytes.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (c *testCluster) getJSON(a *App, path string, v any) int {
	code, body := c.do(a, http.MethodGet, path, nil)
	if code == 200 {
		require.NoError(c.t, json.Unmarshal(body, v))
	}
	return code
}

// createDB creates a database and waits until every shard is online with
// every replica in sync.
func (c *testCluster) createDB(name string, shards, rf int) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		code, _ := c.do(c.core, http.MethodPost, "/api/v1/databases",
			[]byte(fmt.Sprintf(`{"name":%q,"num_shards":%d,"replica_factor":%d}`, name, shards, rf)))
		return code == 201 || code == 409
	}, 20*time.Second, 50*time.Millisecond)
	require.Eventually(c.t, func() bool {
		var out struct {
			Shards []struct {
				Status string   `json:"status"`
				ISR    []string `json:"isr"`
			} `json:"shards"`
		}
		if c.getJSON(c.core, "/api/v1/databases/"+name+"/shards", &out) != 200 || len(out.Shards) != shards {
			return false
		}
		for _, s := range out.Shards {
			if s.Status != "online" || len(s.ISR) != rf {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "database %s never fully online", name)
}

func (c *testCluster) write(db string, body string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		code, _ := c.do(c.core, http.MethodPost, "/api/v1/write?db="+db, []byte(body))
		return code == http.StatusNoContent
	}, 20*time.Second, 50*time.Millisecond)
}

// scrape reads a node's /metrics as Prometheus would, keeping the raw text.
func (c *testCluster) scrape(a *App) ([]byte, map[string]*dto.MetricFamily) {
	c.t.Helper()
	code, body := c.do(a, http.MethodGet, "/metrics", nil)
	require.Equal(c.t, 200, code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(c.t, err)
	return body, fams
}

// value sums a family's series whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
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

// seriesNames lists every name a PromQL expression can use for the scraped
// families (histograms as _bucket, _sum and _count).
func seriesNames(fams ...map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for _, fs := range fams {
		for name, f := range fs {
			out[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
				out[name+"_sum"], out[name+"_count"] = true, true
				out[name+"_bucket"] = f.GetType() == dto.MetricType_HISTOGRAM
			}
		}
	}
	return out
}

var metricToken = regexp.MustCompile(`\b(?:cairn|go|process)_[a-zA-Z0-9_]+`)

// TestMetricsLintAndDeploy scrapes real nodes after writes and queries: the
// scrape is promlint-clean (and promtool-clean when promtool is installed),
// the named metrics carry the values the traffic implies, and every metric
// the Grafana dashboard and the alert rules use exists in the scrape.
func TestMetricsLintAndDeploy(t *testing.T) {
	c := startTestCluster(t, nil)
	c.createDB("m", 2, 2)
	const lines = "cpu,host=a v=1 1700000000000000000\ncpu,host=b v=2 1700000000000000000\ncpu,host=c v=3 1700000000000000000\n"
	c.write("m", lines)
	code, _ := c.do(c.core, http.MethodGet, "/api/v1/query?db=m&metric=cpu&start=0&end=2000000000000000000", nil)
	require.Equal(t, 200, code)
	code, _ = c.do(c.core, http.MethodPost, "/api/v1/write?db=nosuch", []byte(lines))
	require.Equal(t, 404, code)

	rawCore, core := c.scrape(c.core)
	rawPeer, peer := c.scrape(c.peer)

	// The values the traffic implies.
	require.Equal(t, 1.0, value(core, "cairn_build_info", map[string]string{"version": "test", "roles": "etcd,master,broker,storage"}))
	require.Equal(t, 3.0, value(core, "cairn_broker_write_points_total", map[string]string{"database": "m", "status": "204"}))
	require.Equal(t, float64(len(lines)), value(core, "cairn_broker_write_bytes_total", map[string]string{"database": "m", "status": "204"}))
	require.Equal(t, 1.0, value(core, "cairn_broker_write_requests_total", map[string]string{"database": "", "status": "404"}),
		"an unknown database is counted without its name")
	require.Equal(t, 1.0, value(core, "cairn_broker_query_requests_total", map[string]string{"database": "m", "status": "200"}))
	require.GreaterOrEqual(t, value(core, "cairn_broker_write_duration_seconds", nil), 2.0)
	require.Equal(t, 1.0, value(core, "cairn_broker_query_duration_seconds", nil))
	require.Equal(t, 4.0, value(core, "cairn_storage_replicas", nil)+value(peer, "cairn_storage_replicas", nil),
		"2 shards x 2 replicas over two nodes")
	leaders := value(core, "cairn_storage_replicas", map[string]string{"role": "leader"}) + value(peer, "cairn_storage_replicas", map[string]string{"role": "leader"})
	require.Equal(t, 2.0, leaders)
	require.Equal(t, 3.0, value(core, "cairn_storage_write_points_total", nil)+value(peer, "cairn_storage_write_points_total", nil))
	require.Equal(t, 2.0, value(core, "cairn_cluster_shards", map[string]string{"database": "m"}))
	require.Equal(t, 0.0, value(core, "cairn_cluster_shards_offline", map[string]string{"database": "m"}))
	require.Equal(t, 0.0, value(core, "cairn_cluster_shards_under_replicated", map[string]string{"database": "m"}))
	require.Equal(t, 2.0, value(core, "cairn_cluster_storage_nodes", map[string]string{"cluster": "default"}))
	require.Equal(t, 1.0, value(core, "cairn_master_is_master", nil))
	require.Greater(t, value(core, "cairn_master_term", nil), 0.0)
	require.Greater(t, value(core, "cairn_etcd_request_duration_seconds", map[string]string{"operation": "txn"}), 0.0)
	require.Equal(t, 0.0, value(core, "cairn_storage_insync_replicas_missing", nil)+value(peer, "cairn_storage_insync_replicas_missing", nil))
	require.GreaterOrEqual(t, value(core, "cairn_storage_follower_lag_entries", nil)+value(peer, "cairn_storage_follower_lag_entries", nil), 0.0)
	for _, name := range []string{"cairn_state_queue_depth", "cairn_state_backup_age_seconds", "cairn_etcd_request_errors_total"} {
		require.Contains(t, core, name)
	}
	_, hasMaster := peer["cairn_master_is_master"]
	require.False(t, hasMaster, "a storage-only node has no master metrics")

	// The InfluxDB-compatible endpoints count too: their writes as writes,
	// each InfluxQL statement that reaches the shards as a query of its
	// database (a statement error is counted with the status it maps to).
	q := func(name string, l map[string]string) float64 { return value(core, name, l) }
	m200 := map[string]string{"database": "m", "status": "200"}
	m204 := map[string]string{"database": "m", "status": "204"}
	queries, queryObs, writes, points := q("cairn_broker_query_requests_total", m200), q("cairn_broker_query_duration_seconds", nil),
		q("cairn_broker_write_requests_total", m204), q("cairn_broker_write_points_total", m204)
	code, _ = c.do(c.core, http.MethodPost, "/write?db=m", []byte("cpu,host=d v=4 1700000000000000000\ncpu,host=e v=5 1700000000000000000\n"))
	require.Equal(t, http.StatusNoContent, code)
	code, _ = c.do(c.core, http.MethodPost, "/api/v2/write?bucket=m", []byte("cpu,host=f v=6 1700000000000000000\n"))
	require.Equal(t, http.StatusNoContent, code)
	code, body := c.do(c.core, http.MethodGet, "/query?db=m&q="+url.QueryEscape("SELECT mean(v) FROM cpu; SHOW TAG VALUES FROM cpu WITH KEY = host"), nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	code, _ = c.do(c.core, http.MethodGet, "/query?db=nosuch&q="+url.QueryEscape("SELECT v FROM cpu"), nil)
	require.Equal(t, http.StatusOK, code, "InfluxDB answers a statement error in the results")
	_, core = c.scrape(c.core)
	require.Equal(t, writes+2, q("cairn_broker_write_requests_total", m204), "/write and /api/v2/write are counted")
	require.Equal(t, points+3, q("cairn_broker_write_points_total", m204))
	require.Equal(t, queries+2, q("cairn_broker_query_requests_total", m200), "each InfluxQL statement over the shards is a query")
	require.Equal(t, 1.0, q("cairn_broker_query_requests_total", map[string]string{"database": "", "status": "404"}),
		"an InfluxQL statement on an unknown database is counted without its name")
	require.Equal(t, queryObs+3, q("cairn_broker_query_duration_seconds", nil))

	// Lint: the Go-native check always, promtool's too when installed.
	for _, raw := range [][]byte{rawCore, rawPeer} {
		problems, err := promlint.New(bytes.NewReader(raw)).Lint()
		require.NoError(t, err)
		require.Empty(t, problems, "promlint")
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		for _, raw := range [][]byte{rawCore, rawPeer} {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(raw)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "promtool check metrics:\n%s", out)
		}
		out, err := exec.Command(promtool, "check", "rules", "../deploy/prometheus/alerts.yml").CombinedOutput()
		require.NoError(t, err, "promtool check rules:\n%s", out)
	} else {
		t.Log("promtool not installed: promlint only (install Debian's prometheus package for promtool's checks)")
	}

	names := seriesNames(core, peer)
	checkDashboard(t, names)
	checkAlerts(t, names)
}

// checkDashboard parses the Grafana dashboard: valid JSON, unique panel ids,
// every query names only metrics a real node serves.
func checkDashboard(t *testing.T, names map[string]bool) {
	data, err := os.ReadFile("../deploy/grafana/cairn.json")
	require.NoError(t, err)
	type target struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Type    string   `json:"type"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
		GridPos *struct {
			H, W, X, Y int
		} `json:"gridPos"`
	}
	var d struct {
		UID    string  `json:"uid"`
		Title  string  `json:"title"`
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	require.NotEmpty(t, d.UID)
	ids := map[int]bool{}
	queried := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			require.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
			ids[p.ID] = true
			require.NotNil(t, p.GridPos, "panel %q has no position", p.Title)
			require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "panel %q is wider than the grid", p.Title)
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				toks := metricToken.FindAllString(tg.Expr, -1)
				require.NotEmpty(t, toks, "panel %q query %s names no metric", p.Title, tg.RefID)
				for _, m := range toks {
					require.True(t, names[m], "panel %q uses %s, which no node serves", p.Title, m)
					queried[strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count")] = true
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	// Each group of the issue has a panel.
	for _, m := range []string{"cairn_cluster_shards_offline", "cairn_cluster_shards_under_replicated", "cairn_broker_write_points_total",
		"cairn_broker_write_bytes_total", "cairn_broker_write_requests_total", "cairn_broker_write_duration_seconds",
		"cairn_broker_query_duration_seconds", "cairn_storage_replicas", "cairn_storage_insync_replicas_missing",
		"cairn_storage_follower_lag_entries", "cairn_storage_follower_lag_seconds", "cairn_master_failovers_total",
		"cairn_master_leader_changes_total", "cairn_master_is_master", "cairn_master_term", "cairn_etcd_request_errors_total",
		"cairn_etcd_request_duration_seconds", "cairn_state_queue_depth", "cairn_state_backup_age_seconds", "cairn_build_info"} {
		require.True(t, queried[m], "the dashboard has no panel over %s", m)
	}
}

// checkAlerts parses the alert rules without promtool: each rule has a name,
// an expression over metrics a node serves (or `up`), a severity and a summary.
func checkAlerts(t *testing.T, names map[string]bool) {
	data, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &f))
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			alerts[r.Alert] = true
			_, err := model.ParseDuration(r.For)
			require.NoError(t, err, "alert %s: for", r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			for _, m := range metricToken.FindAllString(r.Expr, -1) {
				require.True(t, names[m], "alert %s uses %s, which no node serves", r.Alert, m)
			}
		}
	}
	for _, a := range []string{"CairnShardsOffline", "CairnShardsUnderReplicated", "CairnNoMaster", "CairnEtcdErrors", "CairnFollowerLagging", "CairnNodeDown"} {
		require.True(t, alerts[a], "missing alert %s", a)
	}
}
