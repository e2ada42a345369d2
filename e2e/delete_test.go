package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countOf runs a count() query through the broker: -1 when it fails, 0
// when it finds no point.
func countOf(t *testing.T, addr, db, q string) int64 {
	t.Helper()
	code, res := influxQL(t, addr, db, q, "")
	if code != 200 || res.Results[0].Error != "" {
		return -1
	}
	if len(res.Results[0].Series) == 0 {
		return 0
	}
	n, err := res.Results[0].Series[0].Values[0][1].(json.Number).Int64()
	require.NoError(t, err)
	return n
}

// TestDeleteSurvivesLeaderKill: RF 3; 20 minutes of points of hosts a and
// b; DELETE FROM cpu WHERE host = 'a' AND time < X, then kill -9 of the
// shard's leader right after the acknowledgement. After the failover none
// of host a's points before X is answered and every other point is, a
// point written after the delete before X stays; the killed node,
// restarted and made leader again, answers the same (it replays the delete
// from its log).
func TestDeleteSurvivesLeaderKill(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 1, rf: 3})
	now := time.Now().Truncate(time.Second)
	from := now.Add(-20 * time.Minute)
	x := now.Add(-10 * time.Minute)
	var lines strings.Builder
	var before, after int64 // host a's timestamps before x, and from x on
	for ts := from; !ts.After(now); ts = ts.Add(time.Second) {
		fmt.Fprintf(&lines, "cpu,host=a value=%d,idle=1 %d\ncpu,host=b value=%d %d\n", ts.Unix(), ts.UnixNano(), ts.Unix(), ts.UnixNano())
		if ts.Before(x) {
			before++
		} else {
			after++
		}
	}
	resp, err := http.Post("http://"+c.broker.addr+"/write?db=db", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	q := func(field, cond string) string {
		return fmt.Sprintf(`SELECT count(%q) FROM "cpu" WHERE %s AND time >= %d AND time <= %d`, field, cond, from.UnixNano(), now.UnixNano())
	}
	beforeX := fmt.Sprintf(`"host" = 'a' AND time < %d`, x.UnixNano())
	check := func(stage string, rewritten int64) {
		t.Helper()
		require.Equal(t, rewritten, countOf(t, c.broker.addr, "db", q("value", beforeX)), "%s: host a before X", stage)
		require.Zero(t, countOf(t, c.broker.addr, "db", q("idle", beforeX)), "%s: host a's idle before X", stage)
		require.Equal(t, after, countOf(t, c.broker.addr, "db", q("value", fmt.Sprintf(`"host" = 'a' AND time >= %d`, x.UnixNano()))), "%s: host a from X on", stage)
		require.Equal(t, after, countOf(t, c.broker.addr, "db", q("idle", fmt.Sprintf(`"host" = 'a' AND time >= %d`, x.UnixNano()))), "%s: host a's idle from X on", stage)
		require.Equal(t, before+after, countOf(t, c.broker.addr, "db", q("value", `"host" = 'b'`)), "%s: host b", stage)
	}
	require.Equal(t, before, countOf(t, c.broker.addr, "db", q("value", beforeX)))

	victim := c.shardsOf()[0].Leader
	sent := time.Now()
	code, res := influxQL(t, c.broker.addr, "db", fmt.Sprintf(`DELETE FROM "cpu" WHERE "host" = 'a' AND time < %d`, x.UnixNano()), "")
	require.Equal(t, 200, code)
	require.Empty(t, res.Results[0].Error)
	require.Empty(t, res.Results[0].Series)
	acked := time.Since(sent)
	c.proc(victim).kill9()
	c.waitLeft(victim, 15*time.Second)
	check("after the failover", 0)

	// A write after the delete, before X, stays.
	resp, err = http.Post("http://"+c.broker.addr+"/write?db=db", "text/plain",
		strings.NewReader(fmt.Sprintf("cpu,host=a value=-1 %d\n", x.Add(-time.Minute).UnixNano())))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	check("after a write behind the delete", 1)

	c.proc(victim).restart()
	c.waitHealthy(60 * time.Second)
	code, body := c.broker.post("/api/v1/databases/db/shards/0/leader", map[string]any{"node_id": victim})
	require.Equal(t, http.StatusAccepted, code, "%v", body)
	require.Eventually(t, func() bool { return c.shardsOf()[0].Leader == victim }, 30*time.Second, 50*time.Millisecond)
	check("with the killed node leading again", 1)
	t.Logf("%d points of host a before X deleted (acknowledged by the 3 replicas in %s); %d after X and %d of host b all answered through the kill of %s",
		before, acked.Round(time.Millisecond), after, before+after, victim)
}

// TestDropSeriesAndMeasurement: through InfluxQL on a standalone node (2
// shards), DROP SERIES removes the named series' points and SHOW SERIES
// stops listing them, DROP MEASUREMENT the whole measurement (SHOW
// MEASUREMENTS too), DELETE without FROM a time range of every
// measurement; the other series keep every point, also after a restart.
func TestDropSeriesAndMeasurement(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"d": 2})
	var lines strings.Builder
	for i := range 100 {
		ts := int64(1_700_000_000+i) * 1e9
		fmt.Fprintf(&lines, "cpu,host=a v=%d %d\ncpu,host=b v=%d %d\nmem,host=a v=%d %d\n", i, ts, i, ts, i, ts)
	}
	resp, err := http.Post("http://"+p.addr+"/write?db=d", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	exec := func(q string) {
		t.Helper()
		code, res := influxQL(t, p.addr, "d", q, "")
		require.Equal(t, 200, code)
		require.Empty(t, res.Results[0].Error, q)
	}
	values := func(q string) []string {
		t.Helper()
		code, res := influxQL(t, p.addr, "d", q, "")
		require.Equal(t, 200, code)
		require.Empty(t, res.Results[0].Error, q)
		var out []string
		for _, s := range res.Results[0].Series {
			for _, v := range s.Values {
				out = append(out, fmt.Sprint(v...))
			}
		}
		return out
	}
	count := func(cond string) int64 {
		return countOf(t, p.addr, "d", `SELECT count("v") FROM "cpu" WHERE `+cond)
	}
	require.Equal(t, []string{"cpu", "mem", "warmup"}, values("SHOW MEASUREMENTS"))
	exec(`DROP MEASUREMENT "warmup"`) // startInfluxStandalone's
	require.Equal(t, []string{"cpu", "mem"}, values("SHOW MEASUREMENTS"))

	exec(`DROP SERIES FROM "cpu" WHERE "host" = 'b'`)
	require.Zero(t, count(`"host" = 'b'`))
	require.Equal(t, int64(100), count(`"host" = 'a'`))
	require.Equal(t, []string{"cpu,host=a"}, values(`SHOW SERIES FROM "cpu"`))

	exec(`DROP MEASUREMENT "mem"`)
	require.Equal(t, []string{"cpu"}, values("SHOW MEASUREMENTS"))
	require.Zero(t, countOf(t, p.addr, "d", `SELECT count("v") FROM "mem"`))

	exec(fmt.Sprintf(`DELETE WHERE time < %d`, int64(1_700_000_050)*1e9))
	require.Equal(t, int64(50), count(`"host" = 'a'`))

	p.term()
	p.restart()
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	require.Eventually(t, func() bool { return count(`"host" = 'a'`) == 50 }, 20*time.Second, 50*time.Millisecond, "after a restart")
	require.Zero(t, count(`"host" = 'b'`))
	require.Equal(t, []string{"cpu"}, values("SHOW MEASUREMENTS"))
	require.Equal(t, []string{"cpu,host=a"}, values(`SHOW SERIES FROM "cpu"`))
}

// TestDeleteReachesAFollowerThatWasAway: RF 3; a follower is down while a
// DROP SERIES and a DELETE are acknowledged by the other two; it returns,
// catches up from its leader's log, and once it leads answers without the
// deleted points.
func TestDeleteReachesAFollowerThatWasAway(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 1, rf: 3})
	now := time.Now().Truncate(time.Second)
	from, x := now.Add(-10*time.Minute), now.Add(-5*time.Minute)
	var lines strings.Builder
	for ts := from; !ts.After(now); ts = ts.Add(time.Second) {
		fmt.Fprintf(&lines, "cpu,host=a value=1 %d\ncpu,host=b value=1 %d\ncpu,host=c value=1 %d\n", ts.UnixNano(), ts.UnixNano(), ts.UnixNano())
	}
	resp, err := http.Post("http://"+c.broker.addr+"/write?db=db", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	count := func(host string) int64 {
		return countOf(t, c.broker.addr, "db", fmt.Sprintf(`SELECT count("value") FROM "cpu" WHERE "host" = '%s' AND time >= %d AND time <= %d`, host, from.UnixNano(), now.UnixNano()))
	}
	require.Equal(t, int64(601), count("a"))

	var away string
	for _, id := range c.ids {
		if id != c.shardsOf()[0].Leader {
			away = id
			break
		}
	}
	c.proc(away).kill9()
	c.waitLeft(away, 15*time.Second)
	for _, q := range []string{`DROP SERIES FROM "cpu" WHERE "host" = 'b'`, fmt.Sprintf(`DELETE FROM "cpu" WHERE "host" = 'a' AND time < %d`, x.UnixNano())} {
		code, res := influxQL(t, c.broker.addr, "db", q, "")
		require.Equal(t, 200, code)
		require.Empty(t, res.Results[0].Error, q)
	}
	c.proc(away).restart()
	c.waitHealthy(60 * time.Second)
	code, body := c.broker.post("/api/v1/databases/db/shards/0/leader", map[string]any{"node_id": away})
	require.Equal(t, http.StatusAccepted, code, "%v", body)
	require.Eventually(t, func() bool { return c.shardsOf()[0].Leader == away }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(301), count("a"), "host a from X on")
	require.Zero(t, count("b"))
	require.Equal(t, int64(601), count("c"))
}
