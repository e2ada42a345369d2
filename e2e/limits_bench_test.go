package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// procMiB reads a /proc/<pid>/status field (VmRSS, VmHWM, ...) in MiB.
func procMiB(tb testing.TB, p *Proc, field string) float64 {
	tb.Helper()
	cmd, _ := p.current()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	require.NoError(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.Atoi(strings.Fields(rest)[0])
			require.NoError(tb, err)
			return float64(kb) / 1024
		}
	}
	require.FailNow(tb, "no "+field+" in /proc status")
	return 0
}

// seriesBody is n lines, one new series each: "s,k=<i> v=1".
func seriesBody(from, n int) []byte {
	var sb strings.Builder
	sb.Grow(n * 16)
	for i := from; i < from+n; i++ {
		sb.WriteString("s,k=")
		sb.WriteString(strconv.Itoa(i))
		sb.WriteString(" v=1\n")
	}
	return []byte(sb.String())
}

// BenchmarkMillionSeriesRSS (issue 8 #9): a standalone node with the default
// limits gets one 14 MiB batch of 1e6 new series (refused with 413 by
// --write-max-points), then the same series in batches at the limit, then a
// query over all of them (refused with 413 by --query-max-series). It reports
// the node's peak RSS (VmHWM) after each step.
func BenchmarkMillionSeriesRSS(b *testing.B) {
	for range b.N {
		p := start(b, standaloneArgs(b)...)
		p.waitStatus("/api/v1/ready", 200, 20*time.Second)
		code, body := p.post("/api/v1/databases", map[string]any{"name": "m", "num_shards": 4, "replica_factor": 1})
		require.Equal(b, 201, code, "%v", body)
		client := &http.Client{Timeout: 10 * time.Minute}
		url := "http://" + p.addr + "/api/v1/write?db=m"
		post := func(body []byte) (int, string) {
			var code int
			var msg string
			require.Eventually(b, func() bool {
				var err error
				code, msg, err = postData(client, url, body)
				return err == nil && code != http.StatusServiceUnavailable
			}, 5*time.Minute, 100*time.Millisecond)
			return code, msg
		}
		idle := procMiB(b, p, "VmHWM")
		code, msg := post(seriesBody(0, 1_000_000))
		require.Equal(b, 413, code, msg)
		refused := procMiB(b, p, "VmHWM")
		const step = 200_000
		for from := 0; from < 1_000_000; from += step {
			code, msg := post(seriesBody(from, step))
			require.Equal(b, 204, code, msg)
		}
		stored := procMiB(b, p, "VmHWM")
		code, q := p.get("/api/v1/query?db=m&metric=s&start=0&end=4000000000000000000")
		require.Equal(b, 413, code, "%v", q)
		queried := procMiB(b, p, "VmHWM")
		b.Logf("VmHWM MiB: idle %.0f, after the refused 1e6-series batch %.0f, after 1e6 series stored in batches of %d %.0f, after the refused query %.0f",
			idle, refused, step, stored, queried)
		b.ReportMetric(refused, "refused-batch-hwm-MiB")
		b.ReportMetric(stored, "stored-hwm-MiB")
		b.ReportMetric(queried-stored, "query-growth-MiB")
		p.term()
	}
}
