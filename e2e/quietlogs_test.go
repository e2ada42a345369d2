package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStandaloneStopsQuietly: a standalone node that hosted shards and took
// writes stops on SIGTERM without one line at level error (the embedded
// etcd's expected shutdown errors are not failures), and nothing it logged
// names etcd's own flags instead of Cairn's.
func TestStandaloneStopsQuietly(t *testing.T) {
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	require.Eventually(t, func() bool {
		code, _ := p.post("/api/v1/databases", map[string]any{"name": "quiet", "num_shards": 4, "replica_factor": 1})
		return code == 201 || code == 409
	}, 15*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		resp, err := p.client.Post("http://"+p.addr+"/api/v1/write?db=quiet", "text/plain",
			strings.NewReader("cpu,host=a value=1 1700000000000000000\ncpu,host=b value=2 1700000000000000000\n"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 204
	}, 15*time.Second, 50*time.Millisecond, "writes never succeeded")
	p.term()

	data, err := os.ReadFile(p.log)
	require.NoError(t, err)
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(line, "=== start ") {
			continue // the harness's marker
		}
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "not a JSON log line: %s", line)
		lines++
		require.NotEqual(t, "error", entry["level"], "ERROR line on a normal stop: %s", line)
		require.NotContains(t, line, "--name", "etcd's flag name in a log line: %s", line)
	}
	require.Positive(t, lines)
	require.Contains(t, string(data), `"msg":"stopped"`, "the node logged its stop")
}
