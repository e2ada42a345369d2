package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// influxCLI runs the stock influx CLI (Debian's influxdb-client) against
// addr and returns its output; it must exit 0.
func influxCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	cmd := exec.Command("influx", append([]string{"-host", host, "-port", port}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "influx %v: %s", args, out)
	return string(out)
}

// TestInfluxCLIDDL: the stock influx CLI creates a database with a
// retention policy, imports a file whose DDL section creates another (as
// influx_inspect export writes them), alters and drops them; SHOW
// RETENTION POLICIES matches the database's options as the REST API shows
// them. A point stamped in 1970 (milliseconds sent as nanoseconds) is
// refused naming the database's window.
func TestInfluxCLIDDL(t *testing.T) {
	p := start(t, append(standaloneArgs(t), "--default-shards", "2")...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)

	influxCLI(t, p.addr, "-execute", `CREATE DATABASE "cli" WITH DURATION 30d`)
	code, db := p.get("/api/v1/databases/cli")
	require.Equal(t, 200, code)
	require.Equal(t, "30d", db["retention"])
	require.Equal(t, 2.0, db["num_shards"])
	out := influxCLI(t, p.addr, "-format", "json", "-execute", `SHOW RETENTION POLICIES ON "cli"`)
	require.JSONEq(t, `{"results":[{"series":[{"columns":["name","duration","shardGroupDuration","replicaN","default"],"values":[["autogen","720h0m0s","24h0m0s",1,true]]}]}]}`, out)
	influxCLI(t, p.addr, "-execute", `CREATE DATABASE "cli"`) // exists: succeeds

	now := time.Now().Truncate(time.Second)
	dump := fmt.Sprintf(`# DDL
CREATE DATABASE imported WITH DURATION 2d REPLICATION 1 NAME two_days
# DML
# CONTEXT-DATABASE: imported
# CONTEXT-RETENTION-POLICY: two_days
cpu,host=a value=1 %d
cpu,host=b value=2 %d
cpu,host=a value=3 %d
`, now.Add(-time.Hour).UnixNano(), now.Add(-time.Hour).UnixNano(), now.Add(-time.Minute).UnixNano())
	path := filepath.Join(t.TempDir(), "dump.txt")
	require.NoError(t, os.WriteFile(path, []byte(dump), 0o644))
	out = influxCLI(t, p.addr, "-import", "-path", path)
	require.Contains(t, out, "Processed 3 inserts")
	require.Contains(t, out, "Failed 0 inserts")
	res := influxQuery(t, p.addr, "imported", "", `SELECT sum("value"), count("value") FROM "cpu"`)
	require.Empty(t, res.Results[0].Error)
	require.Equal(t, "6", fmt.Sprint(res.Results[0].Series[0].Values[0][1]))
	require.Equal(t, "3", fmt.Sprint(res.Results[0].Series[0].Values[0][2]))

	// Milliseconds sent as nanoseconds: 1970, refused naming the window;
	// the good line of the batch is stored.
	resp, err := http.Post("http://"+p.addr+"/write?db=imported", "text/plain",
		strings.NewReader(fmt.Sprintf("cpu,host=c value=4 %d\ncpu,host=c value=5 %d\n", now.UnixMilli(), now.UnixNano())))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "partial write: point cpu,host=c at 1970-01-")
	require.Contains(t, string(body), `is outside the accepted time window of database \"imported\"`)
	require.Contains(t, string(body), "(retention 2d, ahead 1d) dropped=1")
	res = influxQuery(t, p.addr, "imported", "", `SELECT count("value") FROM "cpu" WHERE "host" = 'c'`)
	require.Equal(t, "1", fmt.Sprint(res.Results[0].Series[0].Values[0][1]))

	influxCLI(t, p.addr, "-execute", `ALTER RETENTION POLICY two_days ON imported DURATION 3d`)
	out = influxCLI(t, p.addr, "-format", "json", "-execute", `SHOW RETENTION POLICIES ON "imported"`)
	require.JSONEq(t, `{"results":[{"series":[{"columns":["name","duration","shardGroupDuration","replicaN","default"],"values":[["two_days","72h0m0s","24h0m0s",1,true]]}]}]}`, out)
	code, db = p.get("/api/v1/databases/imported")
	require.Equal(t, 200, code)
	require.Equal(t, "3d", db["retention"])
	require.Equal(t, "two_days", db["retention_policy"])

	influxCLI(t, p.addr, "-execute", `DROP DATABASE "cli"`)
	require.Eventually(t, func() bool {
		out = influxCLI(t, p.addr, "-format", "json", "-execute", `SHOW DATABASES`)
		return out == `{"results":[{"series":[{"name":"databases","columns":["name"],"values":[["imported"]]}]}]}`+"\n"
	}, 10*time.Second, 50*time.Millisecond, "SHOW DATABASES: %s", out)
}
