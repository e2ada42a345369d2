package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetentionMaxDiskPct: a standalone node with --retention-max-disk-pct
// 1 (its data disk, a real file system, is fuller than that) deletes the
// oldest blocks of its shards once they are flushed, oldest first, and the
// warning problem retention_disk_pressure names it.
func TestRetentionMaxDiskPct(t *testing.T) {
	p := start(t, append(standaloneArgs(t), "--retention-max-disk-pct", "1", "--retention-check-interval", "1s")...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	code, out := p.post("/api/v1/databases", map[string]any{"name": "full", "num_shards": 1, "replica_factor": 1})
	require.Equal(t, http.StatusCreated, code, out)

	now := time.Now().Truncate(time.Minute)
	var lines strings.Builder
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(time.Minute) {
		fmt.Fprintf(&lines, "cpu,host=a value=1 %d\n", ts.UnixNano())
	}
	require.Eventually(t, func() bool {
		resp, err := http.Post("http://"+p.addr+"/write?db=full", "text/plain", strings.NewReader(lines.String()))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	}, 20*time.Second, 50*time.Millisecond)
	count := func() int64 {
		return countOf(t, p.addr, "full", `SELECT count("value") FROM "cpu" WHERE time > now() - 7h`)
	}
	require.Equal(t, int64(361), count())

	// The memtable flushes after 10 s idle; the next pass deletes its block.
	require.Eventually(t, func() bool { return count() == 0 }, 60*time.Second, 200*time.Millisecond,
		"the oldest blocks were never deleted under disk pressure")
	var problems struct {
		Problems []struct{ Severity, Kind, Node, Message string } `json:"problems"`
	}
	pressure := func() string {
		if getDataJSON(p, "/api/v1/problems", &problems) != 200 {
			return ""
		}
		for _, pr := range problems.Problems {
			if pr.Kind == "retention_disk_pressure" {
				return pr.Severity + ": " + pr.Message
			}
		}
		return ""
	}
	// The node's record carries it at its next refresh.
	require.Eventually(t, func() bool { return pressure() != "" }, 30*time.Second, 100*time.Millisecond,
		"no retention_disk_pressure problem: %+v", problems.Problems)
	msg := pressure()
	require.Contains(t, msg, "warning: ")
	require.Contains(t, msg, "past --retention-max-disk-pct 1: deleted 1 of its oldest blocks")
	t.Log(msg)
}
