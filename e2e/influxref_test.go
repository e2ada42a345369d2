package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The reference InfluxDB 1.x of the differential tests: Debian's influxd
// (package influxdb; `make deps` installs it with the influx CLI).
const (
	influxdBin = "/usr/bin/influxd"
	influxBin  = "/usr/bin/influx"
)

// requireBinary fails (never skips) when a tool the test compares against
// is missing, naming how to install it.
func requireBinary(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: install InfluxDB 1.x (as root: apt-get install -y influxdb influxdb-client, or make deps): %v", path, err)
	}
}

// startInfluxRef runs a reference influxd on free loopback ports with its
// data in a temp dir, usage reporting, monitoring and continuous queries
// off, and returns its HTTP address once /ping answers. It is killed at
// cleanup.
func startInfluxRef(t testing.TB) string {
	t.Helper()
	requireBinary(t, influxdBin)
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := fmt.Sprintf(`reporting-enabled = false
bind-address = %q
[meta]
  dir = %q
  logging-enabled = false
[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
[http]
  bind-address = %q
  log-enabled = false
`, freeAddr(t), filepath.Join(dir, "meta"), filepath.Join(dir, "data"), filepath.Join(dir, "wal"), addr)
	path := filepath.Join(dir, "influxd.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	logf, err := os.Create(filepath.Join(dir, "influxd.log"))
	require.NoError(t, err)
	cmd := exec.Command(influxdBin, "-config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("--- tail of the reference influxd ---\n%s", tail(logf.Name(), 20))
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	}, 30*time.Second, 50*time.Millisecond, "the reference influxd never answered /ping")
	return addr
}

// influxDDL runs a statement on the reference (CREATE DATABASE ...).
func influxDDL(t testing.TB, addr, q string) {
	t.Helper()
	resp, err := http.PostForm("http://"+addr+"/query", url.Values{"q": {q}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.NotContains(t, string(body), `"error"`)
}

// runInfluxCLI runs the stock influx CLI against addr and returns its
// output (stdout and stderr) and exit code.
func runInfluxCLI(t testing.TB, addr string, args ...string) (string, int) {
	t.Helper()
	host, port, ok := strings.Cut(addr, ":")
	require.True(t, ok)
	cmd := exec.Command(influxBin, append([]string{"-host", host, "-port", port}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no ~/.influx_history of the user
	out, err := cmd.CombinedOutput()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// TestInfluxCLI: the stock influx 1.x CLI, unmodified (it asks for
// chunked answers and cannot be told not to), prints the same as it does
// against InfluxDB for what a user types first: SHOW MEASUREMENTS, a
// GROUP BY time and host, SHOW TAG VALUES, a raw select in every format.
func TestInfluxCLI(t *testing.T) {
	requireBinary(t, influxBin)
	ref := startInfluxRef(t)
	p := startInfluxStandalone(t, map[string]int{"cli": 4})
	influxDDL(t, ref, "CREATE DATABASE cli")
	lines := []string{"warmup value=1 1"} // what startInfluxStandalone wrote
	for i := range 90 {
		for h := range 3 {
			lines = append(lines, fmt.Sprintf("cpu,host=h%d,region=eu value=%d,idle=%d.5 %d", h, (i*7+h)%50, i%10, dayStart+int64(i)*10e9))
		}
		lines = append(lines, fmt.Sprintf("mem,host=h0 used=%d %d", i*1000, dayStart+int64(i)*10e9))
	}
	writeLines(t, ref, "cli", lines)
	writeLines(t, p.addr, "cli", lines[1:])

	where := fmt.Sprintf("time >= %d AND time < %d", dayStart, dayStart+15*60e9)
	for _, args := range [][]string{
		{"-execute", "SHOW MEASUREMENTS"},
		{"-execute", "SELECT mean(value) FROM cpu WHERE " + where + " GROUP BY time(1m), host"},
		{"-execute", "SELECT mean(value) FROM cpu WHERE " + where + " GROUP BY time(1m), host", "-precision", "rfc3339"},
		{"-execute", "SHOW TAG VALUES WITH KEY = host"},
		{"-execute", "SHOW FIELD KEYS; SHOW TAG KEYS"},
		{"-execute", "SELECT value, idle FROM cpu WHERE host = 'h1' AND " + where + " LIMIT 5", "-format", "csv"},
		{"-execute", "SELECT max(used) FROM mem WHERE " + where + " GROUP BY time(5m)", "-format", "json"},
		{"-execute", "SELECT value FROM cpu WHERE host = 'h2' AND " + where + " LIMIT 3", "-format", "json", "-pretty"},
		{"-execute", "SHOW DATABASES"},
	} {
		args = append([]string{"-database", "cli"}, args...)
		want, wantCode := runInfluxCLI(t, ref, args...)
		got, code := runInfluxCLI(t, p.addr, args...)
		require.Equal(t, wantCode, code, "influx %q", args)
		require.Equal(t, 0, code, "influx %q: %s", args, got)
		if args[2] == "SHOW DATABASES" { // the reference has _internal too
			want = strings.Replace(want, "cli\n_internal\n", "cli\n", 1)
		}
		require.Equal(t, want, got, "influx %q", args)
		require.NotEmpty(t, strings.TrimSpace(got))
	}

	// influx -import of a file with its DDL section (CREATE DATABASE)
	// imports its points.
	file := filepath.Join(t.TempDir(), "import.txt")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`# DDL
CREATE DATABASE imported
# DML
# CONTEXT-DATABASE: imported
# CONTEXT-RETENTION-POLICY: autogen
up,host=a value=1 %d
up,host=b value=2 %d
up,host=a value=3 %d
`, dayStart, dayStart, dayStart+60e9)), 0o600))
	for _, addr := range []string{ref, p.addr} {
		out, code := runInfluxCLI(t, addr, "-import", "-path", file)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "Processed 3 inserts")
		require.Contains(t, out, "Failed 0 inserts")
	}
	args := []string{"-database", "imported", "-execute", "SELECT sum(value) FROM up GROUP BY host"}
	want, _ := runInfluxCLI(t, ref, args...)
	var got string
	require.Eventually(t, func() bool { // the new database's shards open
		got, _ = runInfluxCLI(t, p.addr, args...)
		return got == want
	}, 20*time.Second, 100*time.Millisecond, "influx %q: want\n%s\ngot\n%s", args, want, got)
}
