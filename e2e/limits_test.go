package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestRequestLimits (issue 8 #9): through the real binary, a write batch over
// --write-max-points and a body over --write-max-body-bytes get 413 naming
// the limit and store nothing; a query whose shards each fit but whose sum is
// over --query-max-series is refused by the broker, one whose single series
// is over --query-max-points is refused by the storage node; both say how
// to narrow, and the narrowed query answers.
func TestRequestLimits(t *testing.T) {
	const shards = 4
	p := start(t, append(standaloneArgs(t), "--write-max-points", "100", "--write-max-body-bytes", "8000",
		"--query-max-series", "6", "--query-max-points", "50")...)
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	code, body := p.post("/api/v1/databases", map[string]any{"name": "lim", "num_shards": shards, "replica_factor": 1})
	require.Equal(t, 201, code, "%v", body)
	require.Eventually(t, func() bool {
		var out struct{ Shards []dataShard }
		if getDataJSON(p, "/api/v1/databases/lim/shards", &out) != 200 || len(out.Shards) != shards {
			return false
		}
		for _, s := range out.Shards {
			if s.Status != "online" || s.Leader == "" {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "shards never online")
	writeURL := "http://" + p.addr + "/api/v1/write?db=lim"
	post := func(body string) (int, string) {
		t.Helper()
		var code int
		var msg string
		require.Eventually(t, func() bool {
			var err error
			code, msg, err = postData(p.client, writeURL, []byte(body))
			return err == nil && code != http.StatusServiceUnavailable
		}, 20*time.Second, 50*time.Millisecond)
		return code, msg
	}

	// Writes: 101 points is one too many; a big body is refused by size.
	var big strings.Builder
	for i := range 101 {
		fmt.Fprintf(&big, "over,host=h value=%d %d\n", i, i+1)
	}
	code, msg := post(big.String())
	require.Equal(t, 413, code, msg)
	require.Contains(t, msg, "--write-max-points")
	// The Influx surfaces answer from the same error table: 413, not 500.
	for _, path := range []string{"/write?db=lim", "/api/v2/write?bucket=lim"} {
		code, msg, err := postData(p.client, "http://"+p.addr+path, []byte(big.String()))
		require.NoError(t, err)
		require.Equal(t, 413, code, "%s: %s", path, msg)
		require.Contains(t, msg, "--write-max-points", path)
	}
	code, msg = post(strings.Repeat("wide,host=h value=1 1\n", 500))
	require.Equal(t, 413, code, msg)
	require.Contains(t, msg, "--write-max-body-bytes")
	var q dataQueryResult
	// query waits out a shard between opening and serving (503).
	query := func(path string) (int, map[string]any) {
		t.Helper()
		var code int
		var body map[string]any
		require.Eventually(t, func() bool {
			code, body = p.get(path)
			return code != 0 && code != http.StatusServiceUnavailable
		}, 20*time.Second, 50*time.Millisecond, "%s kept answering 503: %v", path, body)
		return code, body
	}
	code, _ = query("/api/v1/query?db=lim&metric=over&start=0&end=1000")
	require.Equal(t, 200, code)
	require.Equal(t, 200, getDataJSON(p, "/api/v1/query?db=lim&metric=over&start=0&end=1000", &q))
	require.Empty(t, q.Series, "a refused batch stores nothing")

	// Eight series, two per shard: every shard fits the 6-series limit, the
	// whole answer does not.
	perShard := map[int][]string{}
	for i := 0; len(perShard) < shards || !fullShards(perShard, 2); i++ {
		host := fmt.Sprintf("h%d", i)
		pt := lineproto.Point{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: host}}, Field: "value"}
		s := lineproto.ShardOf(pt.SeriesKey(), shards)
		if len(perShard[s]) < 2 {
			perShard[s] = append(perShard[s], host)
		}
	}
	var lines strings.Builder
	for _, hosts := range perShard {
		for _, h := range hosts {
			fmt.Fprintf(&lines, "cpu,host=%s value=1 10\n", h)
		}
	}
	code, msg = post(lines.String())
	require.Equal(t, 204, code, msg)
	code, qbody := query("/api/v1/query?db=lim&metric=cpu&start=0&end=1000")
	require.Equal(t, 413, code, "%v", qbody)
	qerr := qbody["error"].(map[string]any)
	require.Equal(t, "too_large", qerr["code"])
	require.Contains(t, qerr["message"], "--query-max-series")
	require.Contains(t, qerr["message"], "narrow")
	host := perShard[0][0]
	require.Equal(t, 200, getDataJSON(p, "/api/v1/query?db=lim&metric=cpu&start=0&end=1000&tag="+url.QueryEscape("host:"+host), &q))
	require.Len(t, q.Series, 1)

	// One series of 60 points: over the points limit inside one shard.
	var long strings.Builder
	for i := range 60 {
		fmt.Fprintf(&long, "long,host=x value=%d %d\n", i, 100+i)
	}
	code, msg = post(long.String())
	require.Equal(t, 204, code, msg)
	code, qbody = query("/api/v1/query?db=lim&metric=long&start=0&end=1000")
	require.Equal(t, 413, code, "%v", qbody)
	require.Contains(t, qbody["error"].(map[string]any)["message"], "more than 50 points")
	require.Equal(t, 200, getDataJSON(p, "/api/v1/query?db=lim&metric=long&start=100&end=139", &q))
	require.Len(t, q.Series, 1)
	require.Len(t, q.Series[0].Points, 40)
}

func fullShards(m map[int][]string, n int) bool {
	for _, v := range m {
		if len(v) < n {
			return false
		}
	}
	return true
}
