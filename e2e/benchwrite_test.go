package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchResult is the part of `cairn bench write`'s JSON line the test reads.
type benchResult struct {
	Points        int64   `json:"points"`
	PointsPerS    float64 `json:"points_per_s"`
	Batches       int64   `json:"batches"`
	FailedBatches int64   `json:"failed_batches"`
	Server        *struct {
		PID        int     `json:"pid"`
		CPUSPerMpt float64 `json:"cpu_s_per_mpt"`
		RSSMiB     float64 `json:"rss_mib"`
		GCFraction float64 `json:"gc_cpu_fraction"`
		Note       string  `json:"note"`
	} `json:"server"`
}

// TestBenchWrite: `cairn bench write` against a real standalone node creates
// the database, writes for its duration and reports what the node stored
// (every acknowledged point is there to count), the node's own process (found
// from the URL's port) with its CPU per million points and RSS; a second run
// with --series-offset adds new series beside the first run's.
func TestBenchWrite(t *testing.T) {
	const budget = 1 << 20
	p := start(t, append(standaloneArgs(t), "--memtable-max-bytes", strconv.Itoa(budget))...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	run := func(args ...string) benchResult {
		t.Helper()
		base := []string{"bench", "write", "--url", "http://" + p.addr, "--db", "bw", "--shards", "2",
			"--senders", "2", "--batch", "50", "--duration", "1500ms", "--precision", "s", "--interval", "1s"}
		code, out, errOut := runCLI(t, append(base, args...)...)
		require.Equal(t, 0, code, errOut)
		var r benchResult
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		require.Zero(t, r.FailedBatches, out)
		require.Positive(t, r.Batches, out)
		require.Zero(t, r.Points%r.Batches, out)
		require.Positive(t, r.PointsPerS, out)
		require.NotNil(t, r.Server, out)
		require.Empty(t, r.Server.Note, out)
		cmd, _ := p.current()
		require.Equal(t, cmd.Process.Pid, r.Server.PID, "the node listening on the URL's port")
		require.Positive(t, r.Server.CPUSPerMpt, out)
		require.Positive(t, r.Server.RSSMiB, out)
		require.GreaterOrEqual(t, r.Server.GCFraction, 0.0, out)
		return r
	}
	first := run("--series", "300")
	series := func() int {
		code, resp := influxQL(t, p.addr, "bw", "SHOW SERIES FROM bench", "")
		require.Equal(t, 200, code)
		if len(resp.Results) == 0 || len(resp.Results[0].Series) == 0 {
			return 0
		}
		return len(resp.Results[0].Series[0].Values)
	}
	require.Equal(t, 300, series(), "each sender wrote all its series (a few batches each)")
	count := func() int64 {
		code, resp := influxQL(t, p.addr, "bw", "SELECT count(f0) FROM bench", "")
		require.Equal(t, 200, code)
		require.NotEmpty(t, resp.Results[0].Series, "%+v", resp)
		n, err := strconv.ParseInt(fmt.Sprint(resp.Results[0].Series[0].Values[0][1]), 10, 64)
		require.NoError(t, err)
		return n
	}
	// A request cut by the run's end may be stored unacknowledged: at least.
	require.GreaterOrEqual(t, count(), first.Points)

	second := run("--series", "200", "--series-offset", "300", "--fields", "float=2")
	require.Equal(t, 500, series(), "new series beside the first run's")
	require.GreaterOrEqual(t, count(), first.Points+second.Points)

	// The soft memory limit follows the series index the runs grew (twice
	// it, moved in steps of 1/64: at least once it).
	run("--series", "20000", "--series-offset", "500", "--batch", "5000", "--duration", "2s")
	index := metric(t, p, "cairn_engine_memory_bytes", "kind=index")
	require.Greater(t, index, 20500*100.0, "every series is accounted")
	require.Eventually(t, func() bool {
		return metric(t, p, "go_gc_gomemlimit_bytes") >= 3*budget+128<<20+index
	}, 5*time.Second, 100*time.Millisecond, "the limit follows the index (%v)", index)
	require.GreaterOrEqual(t, metric(t, p, "cairn_gc_cpu_fraction"), 0.0)
	require.Positive(t, metric(t, p, "go_cpu_classes_total_cpu_seconds_total"))

	code, _, errOut := runCLI(t, "bench", "write", "--url", "http://"+p.addr, "--fields", "float=1,complex=2")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `"complex"`)
}
