package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// telegrafVersion is the Telegraf release the tests run, built from the Go
// module proxy with only the plugins they use.
const telegrafVersion = "v1.37.2"

// telegrafBin builds Telegraf (cpu and mem inputs, influxdb and file
// outputs: a custom build as Telegraf documents it) into the user's cache
// dir once per version, and returns the binary. The first build downloads
// and compiles for about 3 minutes on 2 cores; later runs reuse it.
func telegrafBin(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(cache, "cairn-e2e", "telegraf-"+telegrafVersion)
	bin := filepath.Join(dir, "telegraf")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	tmp, err := os.MkdirTemp(dir, "build-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "-tags", "custom,inputs.cpu,inputs.mem,outputs.influxdb,outputs.file",
		"github.com/influxdata/telegraf/cmd/telegraf@"+telegrafVersion)
	cmd.Dir = tmp // outside any module: go install pkg@version builds Telegraf's own
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building telegraf: %s", out)
	// Renamed into place whole, so a concurrent run never sees half a file.
	require.NoError(t, os.Rename(filepath.Join(tmp, "telegraf"), bin))
	return bin
}

// runTelegraf runs Telegraf's default influxdb output (database
// "telegraf", nothing created beforehand) against addr, with password as
// its credential when set, and a file output of the same metrics as the
// record of what it sent. It stops Telegraf (which flushes) once the file
// holds three gathers, and returns the points of the file.
func runTelegraf(t *testing.T, bin, addr, password string) []lineproto.Point {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "metrics.out")
	conf := fmt.Sprintf(`
[agent]
  interval = "1s"
  flush_interval = "1s"
  round_interval = false
  debug = true
[[outputs.influxdb]]
  urls = ["http://%s"]
  username = "telegraf"
  password = %q
[[outputs.file]]
  files = [%q]
  data_format = "influx"
[[inputs.cpu]]
  percpu = true
  totalcpu = true
  collect_cpu_time = true
[[inputs.mem]]
`, addr, password, out)
	cfgPath := filepath.Join(dir, "telegraf.conf")
	require.NoError(t, os.WriteFile(cfgPath, []byte(conf), 0o644))
	logPath := filepath.Join(dir, "telegraf.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("--- telegraf log ---\n%s", tail(logPath, 40))
		}
	}()
	gathers := func() int {
		data, _ := os.ReadFile(out)
		pts, _ := lineproto.Parse(data, "ns", 0)
		stamps := map[int64]bool{}
		for _, p := range pts {
			stamps[p.TS] = true
		}
		return len(stamps)
	}
	require.Eventually(t, func() bool { return gathers() >= 3 }, 60*time.Second, 50*time.Millisecond, "telegraf never gathered 3 times")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "telegraf exits cleanly after its last flush")
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		require.FailNow(t, "telegraf did not stop")
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	pts, err := lineproto.Parse(data, "ns", 0)
	require.NoError(t, err)
	require.NotEmpty(t, pts)
	return pts
}

// requireStored checks that every point is in db, with its value, asking
// the database measurement by measurement through InfluxQL.
func requireStored(t *testing.T, addr, db, password string, pts []lineproto.Point) {
	t.Helper()
	byMetric := map[string]map[string]float64{}
	for _, p := range pts {
		if byMetric[p.Metric] == nil {
			byMetric[p.Metric] = map[string]float64{}
		}
		byMetric[p.Metric][pointID(p.Tags, p.Field, p.TS)] = p.Value
	}
	require.ElementsMatch(t, []string{"cpu", "mem"}, keys(byMetric))
	for metric, want := range byMetric {
		got := map[string]float64{}
		res := influxQuery(t, addr, db, password, fmt.Sprintf(`SELECT * FROM %q GROUP BY *`, metric))
		require.Len(t, res.Results, 1)
		require.Empty(t, res.Results[0].Error)
		for _, s := range res.Results[0].Series {
			var tags []lineproto.Tag
			for k, v := range s.Tags {
				tags = append(tags, lineproto.Tag{Key: k, Value: v})
			}
			sort.Slice(tags, func(i, j int) bool { return tags[i].Key < tags[j].Key })
			for _, row := range s.Values {
				ts, err := row[0].(json.Number).Int64()
				require.NoError(t, err)
				for i, col := range s.Columns[1:] {
					if row[i+1] == nil {
						continue
					}
					v, err := row[i+1].(json.Number).Float64()
					require.NoError(t, err)
					got[pointID(tags, col, ts)] = v
				}
			}
		}
		require.Len(t, got, len(want), "%s: every point Telegraf sent, and nothing else", metric)
		for id, v := range want {
			require.Contains(t, got, id, "%s: point %s missing", metric, id)
			require.Equal(t, v, got[id], "%s: point %s", metric, id)
		}
	}
}

func pointID(tags []lineproto.Tag, field string, ts int64) string {
	var b strings.Builder
	for _, tg := range tags {
		b.WriteString(tg.Key + "=" + tg.Value + ",")
	}
	return fmt.Sprintf("%s#%s@%d", b.String(), field, ts)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// influxQuery POSTs q to /query with epoch=ns, the password as basic auth
// when set, and decodes the answer (any status).
func influxQuery(t *testing.T, addr, db, password, q string) influxResponse {
	t.Helper()
	code, res := influxPost(t, addr, db, password, q)
	require.Equal(t, http.StatusOK, code, "%s: %+v", q, res)
	return res
}

func influxPost(t *testing.T, addr, db, password, q string) (int, influxResponse) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+"/query",
		strings.NewReader(url.Values{"db": {db}, "q": {q}, "epoch": {"ns"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if password != "" {
		req.SetBasicAuth("telegraf", password)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out influxResponse
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&out), "answer: %s", body)
	return resp.StatusCode, out
}

// TestTelegrafDefaultConfig: a real Telegraf with its default influxdb
// output against a fresh standalone node: its CREATE DATABASE "telegraf"
// makes the database with the node's --default-shards, and every point it
// sent is stored with its value. With an admin token set, an
// unauthenticated CREATE DATABASE is refused (401, nothing created), and
// Telegraf configured with the token does the same as without tokens.
func TestTelegrafDefaultConfig(t *testing.T) {
	bin := telegrafBin(t)

	open := start(t, append(standaloneArgs(t), "--default-shards", "3")...)
	open.waitStatus("/api/v1/ready", 200, 15*time.Second)
	pts := runTelegraf(t, bin, open.addr, "")
	code, db := open.get("/api/v1/databases/telegraf")
	require.Equal(t, 200, code)
	require.Equal(t, 3.0, db["num_shards"], "--default-shards")
	require.Equal(t, 1.0, db["replica_factor"])
	requireStored(t, open.addr, "telegraf", "", pts)
	t.Logf("without tokens: %d points stored", len(pts))

	secured := start(t, append(standaloneArgs(t), "--admin-token", "adm-secret")...)
	secured.waitStatus("/api/v1/ready", 200, 15*time.Second)
	code, res := influxPost(t, secured.addr, "", "", `CREATE DATABASE "telegraf"`)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, res.Error, "needs a admin token")
	code, res = influxPost(t, secured.addr, "", "wrong", `CREATE DATABASE "telegraf"`)
	require.Equal(t, http.StatusUnauthorized, code, "%+v", res)
	code, _ = secured.send("GET", "/api/v1/databases/telegraf", nil, "Bearer adm-secret")
	require.Equal(t, 404, code, "nothing created")
	pts = runTelegraf(t, bin, secured.addr, "adm-secret")
	requireStored(t, secured.addr, "telegraf", "adm-secret", pts)
	t.Logf("with the admin token: %d points stored", len(pts))
}
