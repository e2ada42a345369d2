package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rollupQuery is the statement the rollup must answer as the raw points did.
const rollupQuery = `SELECT mean(v), max(v), count(v) FROM m WHERE time > now() - 6h GROUP BY time(1h)`

// TestRollupAnswersPastTheRawRetention (issue 27): a database with a 5m
// rollup kept 30 days holds 5 h 20 min of points of 3 hosts; its raw
// retention then becomes 2h and the node expires the older blocks (a pass
// a second here). The GROUP BY time(1h) of mean, max and count over the
// last 6 hours then answers the values the raw points gave before, the
// hours past the retention from the rollup's cells; a count without GROUP
// BY time, which no rollup answers, sees only the last 2 hours; SHOW
// RETENTION POLICIES lists the raw policy and the rollup with their
// durations. A reference InfluxDB 1.x holding the same points (raw, kept)
// answers a GROUP BY time(1h), host of mean, max, min, sum, count and last
// over a fixed range with the same bytes as Cairn, before the expiry from
// the raw points and after it from the rollup, also after a DELETE of one
// host's older hours. Bad rollup levels are refused with a 400 naming the
// fault.
func TestRollupAnswersPastTheRawRetention(t *testing.T) {
	ref := startInfluxRef(t)
	influxDDL(t, ref, "CREATE DATABASE roll")
	p := start(t, append(standaloneArgs(t), "--retention-check-interval", "1s")...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	db := map[string]any{"name": "roll", "num_shards": 2, "replica_factor": 1, "retention": "7h",
		"rollups": []map[string]any{{"interval": "7m", "retention": "30d"}}}
	code, out := p.post("/api/v1/databases", db)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, fmt.Sprint(out), "interval 7m does not divide an hour")
	db["rollups"] = []map[string]any{{"interval": "5m", "retention": "30d", "functions": []string{"min", "max", "sum", "count", "last"}}}
	code, out = p.post("/api/v1/databases", db)
	require.Equal(t, http.StatusCreated, code, out)

	now := time.Now().Truncate(10 * time.Second)
	var lines strings.Builder
	n := 0
	for ts := now.Add(-5*time.Hour - 30*time.Minute); !ts.After(now.Add(-10 * time.Minute)); ts = ts.Add(10 * time.Second) {
		for host := range 3 {
			fmt.Fprintf(&lines, "m,host=h%d v=%d %d\n", host, (ts.Unix()/10*7+int64(host))%101, ts.UnixNano())
			n++
		}
	}
	for _, addr := range []string{p.addr, ref} {
		writeOnceKnown(t, addr, "roll", lines.String())
	}
	fixed := diffCase{q: fmt.Sprintf(`SELECT mean(v), max(v), min(v), sum(v), count(v), last(v) FROM m WHERE time > %d AND time <= %d GROUP BY time(1h), host`,
		now.Add(-6*time.Hour).UnixNano(), now.UnixNano())}
	code, want := queryBody(t, ref, "roll", fixed)
	require.Equal(t, http.StatusOK, code, want)
	require.Contains(t, want, `"tags":{"host":"h2"}`)
	code, got := queryBody(t, p.addr, "roll", fixed)
	require.Equal(t, http.StatusOK, code, got)
	require.Equal(t, want, got, "InfluxDB 1.x and Cairn over the raw points")
	before := hourRows(t, p.addr)
	require.GreaterOrEqual(t, len(before), 6, "%v", before)
	total := 0
	for _, r := range before {
		total += rowCount(t, r)
	}
	require.Equal(t, n, total)

	code, out = p.send(http.MethodPatch, "/api/v1/databases/roll", map[string]any{"retention": "2h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	policies := ""
	assert.Eventually(t, func() bool { // once this node's state has the PATCH
		rps := influxQuery(t, p.addr, "roll", "", `SHOW RETENTION POLICIES`)
		policies = fmt.Sprint(rps.Results[0].Series[0].Values)
		return strings.Contains(policies, "2h0m0s")
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, `[[autogen 2h0m0s 1h0m0s 1 true] [rollup_5m 720h0m0s 1h0m0s 1 false]]`, policies)

	// The expiry drops the blocks past 2h (once the points are flushed:
	// 10 s idle), and their hours are answered from the cells.
	require.Eventually(t, func() bool { return expiryLogged(t, p.log) }, 60*time.Second, 200*time.Millisecond, "no expiry logged")
	var after [][]any
	assert.Eventually(t, func() bool {
		after = hourRows(t, p.addr)
		return fmt.Sprint(after) == fmt.Sprint(before)
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, fmt.Sprint(before), fmt.Sprint(after), "the hours past the raw retention from the rollup")
	code, got = queryBody(t, p.addr, "roll", fixed)
	require.Equal(t, http.StatusOK, code, got)
	require.Equal(t, want, got, "InfluxDB 1.x over the raw points, Cairn over the rollup")

	// A delete over the rollup's hours, the same in both: the deleted
	// points are not answered from the cells (the range ends on an hour, so
	// it holds whole cells, which go; InfluxDB deletes the raw points).
	cut := now.Truncate(time.Hour).Add(-3 * time.Hour)
	del := diffCase{q: fmt.Sprintf(`DELETE FROM m WHERE host = 'h1' AND time < %d`, cut.UnixNano())}
	for _, addr := range []string{ref, p.addr} {
		code, body := queryBody(t, addr, "roll", del)
		require.Equal(t, http.StatusOK, code, body)
		require.NotContains(t, body, "error")
	}
	code, want = queryBody(t, ref, "roll", fixed)
	require.Equal(t, http.StatusOK, code, want)
	code, got = queryBody(t, p.addr, "roll", fixed)
	require.Equal(t, http.StatusOK, code, got)
	require.Equal(t, want, got, "after a delete: InfluxDB 1.x over the raw points, Cairn over the rollup")

	res := influxQuery(t, p.addr, "roll", "", `SELECT count(v) FROM m WHERE time > now() - 6h`)
	require.Len(t, res.Results[0].Series, 1)
	raw := rowCount(t, res.Results[0].Series[0].Values[0])
	require.Less(t, raw, n/2, "without GROUP BY time only the raw points of the last 2 hours")
	t.Logf("%d points; by hour before and after the raw expiry: %v; raw count after: %d", n, after, raw)
}

// hourRows are rollupQuery's rows that hold points.
func hourRows(t *testing.T, addr string) [][]any {
	t.Helper()
	res := influxQuery(t, addr, "roll", "", rollupQuery)
	require.Empty(t, res.Results[0].Error)
	require.Len(t, res.Results[0].Series, 1)
	var rows [][]any
	for _, r := range res.Results[0].Series[0].Values {
		if rowCount(t, r) > 0 {
			rows = append(rows, r)
		}
	}
	return rows
}

// rowCount is a row's last column, a count.
func rowCount(t *testing.T, row []any) int {
	t.Helper()
	c, err := row[len(row)-1].(json.Number).Int64()
	require.NoError(t, err)
	return int(c)
}

func expiryLogged(t *testing.T, log string) bool {
	logged, err := os.ReadFile(log)
	require.NoError(t, err)
	return strings.Contains(string(logged), `"msg":"expired points past the retention"`)
}

// TestRollupEveryReplicaAnswersTheSame: RF 3, one shard, a 5m rollup; after
// the raw retention drops to 2h and every node expired its older blocks,
// each replica in turn leads and answers the GROUP BY time(1h), host over
// the expired hours with the bytes the raw points gave before: followers
// computed the same cells from the log they applied, flushed by their own
// schedule.
func TestRollupEveryReplicaAnswersTheSame(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 1, rf: 3,
		nodeArgs: func(int) []string { return []string{"--retention-check-interval", "1s"} }})
	code, out := c.broker.send(http.MethodPatch, "/api/v1/databases/db", map[string]any{"retention": "7h",
		"rollups": []map[string]any{{"interval": "5m", "retention": "30d"}}}, "")
	require.Equal(t, http.StatusOK, code, out)
	now := time.Now().Truncate(5 * time.Minute)
	var lines strings.Builder
	for ts := now.Add(-5*time.Hour - 30*time.Minute); !ts.After(now.Add(-10 * time.Minute)); ts = ts.Add(10 * time.Second) {
		for host := range 3 {
			fmt.Fprintf(&lines, "m,host=h%d v=%d %d\n", host, (ts.Unix()/10*3+int64(host)*5)%97, ts.UnixNano())
		}
	}
	resp, err := http.Post("http://"+c.broker.addr+"/write?db=db", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	q := diffCase{q: fmt.Sprintf(`SELECT mean(v), max(v), min(v), count(v), last(v) FROM m WHERE time > %d AND time < %d GROUP BY time(1h), host`,
		now.Add(-6*time.Hour).UnixNano(), now.Add(-3*time.Hour).UnixNano())} // ends on a 5m interval's end
	code, want := queryBody(t, c.broker.addr, "db", q)
	require.Equal(t, http.StatusOK, code, want)
	require.Contains(t, want, `"tags":{"host":"h2"}`)

	code, out = c.broker.send(http.MethodPatch, "/api/v1/databases/db", map[string]any{"retention": "2h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	for i, p := range c.storage {
		require.Eventually(t, func() bool { return expiryLogged(t, p.log) }, 60*time.Second, 200*time.Millisecond, "%s never expired", c.ids[i])
	}
	for _, id := range c.ids {
		if c.shardsOf()[0].Leader != id {
			code, body := c.broker.post("/api/v1/databases/db/shards/0/leader", map[string]any{"node_id": id})
			require.Equal(t, http.StatusAccepted, code, "%v", body)
			require.Eventually(t, func() bool { return c.shardsOf()[0].Leader == id }, 30*time.Second, 50*time.Millisecond)
		}
		var got string
		assert.Eventually(t, func() bool {
			code, got = queryBody(t, c.broker.addr, "db", q)
			return code == http.StatusOK && got == want
		}, 30*time.Second, 200*time.Millisecond)
		require.Equal(t, want, got, "%s leading, from its own rollup", id)
	}
}

// TestRollupMillionPointsSeries (issue 27's figure, through the binary):
// one series of 1,000,200 points a second apart (11.6 days) with a 5m
// rollup, the database created with it or given it by a PATCH once the
// points were flushed (the node then fills it from them); its raw retention
// then drops to 2h and the node expires them all. GROUP BY time(1h) of
// mean, max and count over the whole span answers the values the raw points
// gave before, and the node's counters show the answer read the series'
// 3,334 cells and no block.
func TestRollupMillionPointsSeries(t *testing.T) {
	for _, added := range []bool{false, true} {
		t.Run(fmt.Sprintf("added_later=%v", added), func(t *testing.T) { millionPointsRollup(t, added) })
	}
}

func millionPointsRollup(t *testing.T, addedLater bool) {
	p, dataDir := startExpiringStandalone(t)
	rollups := []map[string]any{{"interval": "5m", "retention": "30d"}}
	db := map[string]any{"name": "big", "num_shards": 1, "replica_factor": 1, "retention": "13d"}
	if !addedLater {
		db["rollups"] = rollups
	}
	code, out := p.post("/api/v1/databases", db)
	require.Equal(t, http.StatusCreated, code, out)

	const n = 1_000_200 // 3,334 cells of 5 minutes
	end := time.Now().Truncate(time.Hour).Add(-3 * time.Hour)
	start := end.Add(-n * time.Second)
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "m,host=a v=%d %d\n", (i*7)%101, start.Add(time.Duration(i)*time.Second).UnixNano())
		if (i+1)%100_000 == 0 || i == n-1 {
			writeOnceKnown(t, p.addr, "big", lines.String())
			lines.Reset()
		}
	}
	q := fmt.Sprintf(`SELECT mean(v), max(v), count(v) FROM m WHERE time >= %d AND time < %d GROUP BY time(1h)`, start.UnixNano(), end.UnixNano())
	hours := func() string {
		res := influxQuery(t, p.addr, "big", "", q)
		require.Empty(t, res.Results[0].Error)
		if len(res.Results[0].Series) == 0 {
			return ""
		}
		return fmt.Sprint(res.Results[0].Series[0].Values)
	}
	took := time.Now()
	before := hours()
	rawTook := time.Since(took)
	require.Contains(t, before, " 3600]", "whole hours of points")

	patch := map[string]any{"retention": "2h"}
	if addedLater {
		// Once a flush wrote blocks (the shard file grows past 1 MiB), the
		// level and the retention in one PATCH: the node's expiry pass
		// fills the level from the blocks before it drops them.
		require.Eventually(t, func() bool { return shardFileBytes(t, dataDir) > 1<<20 }, 60*time.Second, 100*time.Millisecond,
			"the points never reached the shard file")
		patch["rollups"] = rollups
	}
	code, out = p.send(http.MethodPatch, "/api/v1/databases/big", patch, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Eventually(t, func() bool { return expiryLogged(t, p.log) }, 60*time.Second, 200*time.Millisecond, "no expiry logged")
	raw := influxQuery(t, p.addr, "big", "", fmt.Sprintf(`SELECT count(v) FROM m WHERE time >= %d AND time < %d`, start.UnixNano(), end.UnixNano()))
	require.Empty(t, raw.Results[0].Series, "no raw point answered in the range")
	var after string
	assert.Eventually(t, func() bool { after = hours(); return after == before }, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, before, after, "from the rollup, the values the raw points gave")

	blocks, cells := metric(t, p, "cairn_storage_blocks_read_total"), metric(t, p, "cairn_storage_rollup_cells_read_total")
	took = time.Now()
	require.Equal(t, before, hours())
	elapsed := time.Since(took)
	require.Equal(t, blocks, metric(t, p, "cairn_storage_blocks_read_total"), "no block read")
	require.Equal(t, cells+3334, metric(t, p, "cairn_storage_rollup_cells_read_total"), "the series' cells")
	t.Logf("%d points; GROUP BY time(1h) over them from the raw points (memtable and blocks) %s, from the 5m rollup: 3334 cells, no block, %s",
		n, rawTook, elapsed)
}

// startExpiringStandalone starts a ready standalone node that runs an
// expiry pass every second, and returns it with its data dir.
func startExpiringStandalone(t *testing.T) (*Proc, string) {
	dataDir := t.TempDir()
	args := standaloneArgs(t)
	for i := range args {
		if args[i] == "--data-dir" {
			args[i+1] = dataDir
		}
	}
	p := start(t, append(args, "--retention-check-interval", "1s")...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	return p, dataDir
}

// shardFileBytes is the size of the shard files under a node's data dir,
// their sealed partition files included.
func shardFileBytes(t *testing.T, dataDir string) int64 {
	var total int64
	for _, size := range shardFiles(t, dataDir) {
		total += size
	}
	return total
}

// shardFiles lists the shard files under a node's data dir and their
// sealed partition files (<shard>.db.p<id>), by path, with their sizes.
func shardFiles(t *testing.T, dataDir string) map[string]int64 {
	out := make(map[string]int64)
	require.NoError(t, filepath.WalkDir(filepath.Join(dataDir, "shards"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".db") && !strings.Contains(d.Name(), ".db.p") {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			out[path] = fi.Size()
		}
		return err
	}))
	return out
}

// partitionFiles keeps the sealed partition files of shardFiles.
func partitionFiles(files map[string]int64) map[string]int64 {
	out := make(map[string]int64)
	for path, size := range files {
		if strings.Contains(filepath.Base(path), ".db.p") {
			out[path] = size
		}
	}
	return out
}

// writeOnceKnown writes body to db, again while the node answers 404: its
// state may not show a database created a moment ago yet (the same points
// written twice are stored once).
func writeOnceKnown(t *testing.T, addr, db, body string) {
	t.Helper()
	code := 0
	require.Eventually(t, func() bool {
		resp, err := http.Post("http://"+addr+"/write?db="+db, "text/plain", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		code = resp.StatusCode
		return code != http.StatusNotFound
	}, 10*time.Second, 20*time.Millisecond, "database %s never known", db)
	require.Equal(t, http.StatusNoContent, code)
}
