package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDiskFailureFencesTheNode (issue 23): at RF 3, with a writer running,
// the write-ahead log of the storage node leading the most shards starts
// failing as a full disk does (--fault-injection). The node logs one ERROR
// naming the cause, /api/v1/health answers 503 with it, the problems list
// shows a critical disk_full naming the node and the log file, /metrics
// shows it, and the master hands its leaderships to in-sync replicas:
// writes go on within lease TTL + 2 s, and a write to an RF 1 shard it
// leads answers 507 insufficient_storage at once. Once the disk takes
// writes again the node heals by itself and is back in every in-sync set
// without a restart; no acknowledged point is lost.
func TestDiskFailureFencesTheNode(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: dataShards, rf: 3,
		nodeArgs: func(int) []string { return []string{"--fault-injection"} }})
	code, body := c.broker.post("/api/v1/databases", map[string]any{"name": "solo", "num_shards": 6, "replica_factor": 1})
	require.Equal(t, 201, code, "create database solo: %v", body)
	w := startDataWriter(t, c, dataSeries, dataPerPost, 0, 120*time.Second)
	w.waitAcked(20, 20*time.Second)

	victim, led := c.busiestLeader()
	p := c.proc(victim)
	soloSeries := seriesLedBy(t, c, "solo", victim)
	code, body = p.post("/api/v1/debug/faults", map[string]any{"disk": "full"})
	require.Equal(t, 204, code, "inject: %v", body)
	faulted := time.Now()

	// Writes go on: the first batch sent after the fault is acknowledged,
	// and no gap between acknowledgements is longer than TTL + 2 s.
	resumed := w.firstAckStartedAfter(faulted, 20*time.Second)
	c.waitLeft(victim, 15*time.Second) // it leads nothing and is in no in-sync set
	handedOver := time.Since(faulted)
	w.waitAcked(len(ackedOf(w))+10, 20*time.Second)
	acked, fails := w.snapshot()
	stall := dataLongestStall(acked)
	t.Logf("disk full on %s (leader of shards %v): first batch sent after the fault acknowledged %s after it; leaderships handed over and out of every in-sync set within %s; longest stall between acknowledgements %s; failures %s",
		victim, led, resumed.end.Sub(faulted).Round(time.Millisecond), handedOver.Round(time.Millisecond), stall.Round(time.Millisecond), describeDataFailures(fails))
	require.LessOrEqual(t, stall, dataLeaseTTL+2*time.Second, "writes must go on within lease TTL + 2 s of the disk failure")

	// The RF 1 shard it leads answers 507 at once, naming the cause.
	hc := testClient(20 * time.Second)
	soloURL := fmt.Sprintf("http://%s/api/v1/write?db=solo", c.broker.addr)
	sent := time.Now()
	status, msg, err := postData(hc, soloURL, []byte(soloSeries+" value=1 "+fmt.Sprint(dataBase)+"\n"))
	took := time.Since(sent)
	require.NoError(t, err)
	t.Logf("RF 1 write to a shard of %s: %d after %s: %s", victim, status, took.Round(time.Millisecond), msg)
	require.Equal(t, http.StatusInsufficientStorage, status, msg)
	require.Contains(t, msg, "insufficient_storage")
	require.Contains(t, msg, "no space left on device")
	require.Less(t, took, time.Second, "507 at once, not after a timeout")

	// Health, problems, metrics and the log name the cause.
	code, h := p.get("/api/v1/health")
	require.Equal(t, 503, code)
	require.Contains(t, h["cause"], "no space left on device")
	var probs struct {
		Problems []struct {
			Severity, Kind, Node, Message string
		} `json:"problems"`
	}
	require.Eventually(t, func() bool {
		if getDataJSON(c.broker, "/api/v1/problems", &probs) != 200 {
			return false
		}
		return slices.ContainsFunc(probs.Problems, func(p struct{ Severity, Kind, Node, Message string }) bool {
			return p.Severity == "critical" && p.Kind == "disk_full" && p.Node == victim && strings.Contains(p.Message, ".wal")
		})
	}, 10*time.Second, 50*time.Millisecond, "no critical disk_full problem naming %s and its log file: %+v", victim, probs)
	require.Contains(t, metricsText(p), `cairn_storage_disk_fault{kind="disk_full"} 1`)
	errs := logLines(t, p, "error", "write-ahead log failed")
	require.Len(t, errs, 1, "one ERROR per failure: %v", errs)
	require.Contains(t, errs[0], "no space left on device")
	for _, q := range []*Proc{p, c.broker} {
		require.Empty(t, logLines(t, q, "warn", `"status":507`), "each refused write is no news in the log")
		require.Empty(t, logLines(t, q, "warn", `"status":503`), "nor is the fenced node's health")
	}

	// The disk takes writes again: the node heals and rejoins every
	// in-sync set, no restart.
	code, _ = p.post("/api/v1/debug/faults", map[string]any{"disk": ""})
	require.Equal(t, 204, code)
	cleared := time.Now()
	require.Eventually(t, func() bool { code, _ := p.get("/api/v1/health"); return code == 200 },
		15*time.Second, 20*time.Millisecond, "the node never healed")
	healed := time.Since(cleared)
	c.waitHealthy(30 * time.Second)
	rejoined := time.Since(cleared)
	t.Logf("fault cleared: healthy after %s, back in every in-sync set after %s", healed.Round(time.Millisecond), rejoined.Round(time.Millisecond))
	require.Contains(t, metricsText(p), `cairn_storage_disk_fault{kind="disk_full"} 0`)
	status, msg, err = postData(hc, soloURL, []byte(soloSeries+" value=2 "+fmt.Sprint(dataBase)+"\n"))
	require.NoError(t, err)
	require.Equal(t, 204, status, msg)

	w.waitAcked(len(ackedOf(w))+10, 20*time.Second)
	w.stop()
	n := c.verifyAcked(w)
	_, fails = w.snapshot()
	t.Logf("%d acknowledged points verified, 0 lost; %d batches not acknowledged (%s)", n, len(fails), describeDataFailures(fails))
}

// ackedOf is how many batches w has acknowledged so far.
func ackedOf(w *dataWriter) []dataBatch {
	acked, _ := w.snapshot()
	return acked
}

// seriesLedBy finds a series of db whose shard node leads, once db's
// shards have leaders.
func seriesLedBy(t *testing.T, c *dataCluster, db, node string) string {
	t.Helper()
	found := ""
	require.Eventually(t, func() bool {
		for i := range 200 {
			series := fmt.Sprintf("%s,host=h%d", db, i)
			var route struct {
				Leader struct {
					NodeID string `json:"node_id"`
				} `json:"leader"`
			}
			if getDataJSON(c.broker, "/api/v1/route?db="+db+"&series="+series, &route) != 200 {
				return false
			}
			if route.Leader.NodeID == node {
				found = series
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "no series of %s is led by %s", db, node)
	return found
}

// logLines are p's log lines of level containing what.
func logLines(t *testing.T, p *Proc, level, what string) []string {
	t.Helper()
	f, err := os.Open(p.log)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	require.NoError(t, sc.Err())
	return out
}
