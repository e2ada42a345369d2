package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecreatedDatabaseStartsEmpty: a database dropped and created again
// under the same name, well within the storage node's drop delay (its old
// replicas are still open), answers with none of the old incarnation's
// points, and takes new writes from txn 1.
func TestRecreatedDatabaseStartsEmpty(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"re": 2})
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("m,host=h%d v=1 %d", i, 1_700_000_000_000_000_000+int64(i)))
	}
	writeLines(t, p.addr, "re", lines)
	require.Equal(t, int64(20), countV(t, p.addr, "re"))

	code, body := p.send(http.MethodDelete, "/api/v1/databases/re", nil, "")
	require.Equal(t, http.StatusNoContent, code, "%v", body)
	require.Eventually(t, func() bool {
		code, _ := p.post("/api/v1/databases", map[string]any{"name": "re", "num_shards": 2, "replica_factor": 1})
		return code == http.StatusCreated
	}, 15*time.Second, 50*time.Millisecond, "the name never became free again")
	require.Eventually(t, func() bool {
		resp, err := http.Post("http://"+p.addr+"/write?db=re", "text/plain", strings.NewReader("warmup value=1 1"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	}, 20*time.Second, 50*time.Millisecond, "the new database never writable")
	require.Equal(t, int64(0), countV(t, p.addr, "re"), "points of the dropped incarnation answered")

	writeLines(t, p.addr, "re", lines[:3])
	require.Equal(t, int64(3), countV(t, p.addr, "re"))
}

// countV is SELECT count(v) FROM m over all time (0 without a row).
func countV(t *testing.T, addr, db string) int64 {
	t.Helper()
	code, out := influxQL(t, addr, db, "SELECT count(v) FROM m", "")
	require.Equal(t, http.StatusOK, code, "%+v", out)
	require.Len(t, out.Results, 1)
	require.Empty(t, out.Results[0].Error)
	if len(out.Results[0].Series) == 0 {
		return 0
	}
	vals := out.Results[0].Series[0].Values
	require.Len(t, vals, 1)
	n, err := vals[0][1].(interface{ Int64() (int64, error) }).Int64()
	require.NoError(t, err)
	return n
}
