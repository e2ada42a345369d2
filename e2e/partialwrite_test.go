package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// partialBatch is 1,000 lines of metric, of which lines 2, 500 and 1000
// are bad: 997 good ones at timestamps 1..1000 except those.
func partialBatch(metric string) string {
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		switch i {
		case 2:
			fmt.Fprintf(&b, "%s,host=h v= %d\n", metric, i)
		case 500:
			fmt.Fprintf(&b, "%s,host=h\n", metric)
		case 1000:
			fmt.Fprintf(&b, "%s,host=h v=1 12x\n", metric)
		default:
			fmt.Fprintf(&b, "%s,host=h%d v=%d %d\n", metric, i%13, i, i)
		}
	}
	return b.String()
}

// TestPartialWrite (issue 21 #3): on each write endpoint, a batch of 1,000
// lines with 3 bad ones stores the 997 good ones and answers 400 with
// InfluxDB's "partial write: <first bad line> dropped=3".
func TestPartialWrite(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"pw": 4})
	endpoints := map[string]string{
		"v1":  "/write?db=pw",
		"v2":  "/api/v2/write?bucket=pw",
		"api": "/api/v1/write?db=pw",
	}
	for metric, path := range endpoints {
		code, msg, err := postData(p.client, "http://"+p.addr+path, []byte(partialBatch(metric)))
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, code, msg)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(msg), &body), msg)
		var text string
		switch metric {
		case "v1":
			text, _ = body["error"].(string)
		case "v2":
			require.Equal(t, "invalid", body["code"])
			text, _ = body["message"].(string)
		case "api":
			inner, _ := body["error"].(map[string]any)
			text, _ = inner["message"].(string)
		}
		want := fmt.Sprintf("partial write: unable to parse '%s,host=h v= 2': ", metric)
		require.True(t, strings.HasPrefix(text, want), "%s: %s", metric, text)
		require.True(t, strings.HasSuffix(text, " dropped=3"), "%s: %s", metric, text)

		code, res := influxQL(t, p.addr, "pw", fmt.Sprintf(`SELECT count(v), sum(v) FROM %s`, metric), "")
		require.Equal(t, 200, code)
		require.Len(t, res.Results, 1)
		require.Empty(t, res.Results[0].Error)
		row := res.Results[0].Series[0].Values[0]
		require.Equal(t, json.Number("997"), row[1], metric)
		require.Equal(t, json.Number(fmt.Sprint(1000*1001/2-2-500-1000)), row[2], metric)
	}
	// All lines bad: nothing stored, the same shape.
	code, msg, err := postData(p.client, "http://"+p.addr+"/write?db=pw", []byte("bad\nworse"))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, msg, `"partial write: unable to parse 'bad': `)
	require.Contains(t, msg, ` dropped=2"`)
}

// TestLineLimits (issue 26 #2): a 40 KB and a 10 MB tag value (keys bbolt
// could never hold) are refused per line with a 400 partial write naming
// the limit; the good lines of those batches are stored, the shards stay
// writable and flush, and no problem is reported.
func TestLineLimits(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"lim": 2})
	for _, size := range []int{40 << 10, 10 << 20} {
		body := fmt.Sprintf("good,n=%d v=1 1\nbig,host=%s v=1 1\ngood,n=%d v=2 2\n", size, strings.Repeat("a", size), size)
		code, msg, err := postData(p.client, "http://"+p.addr+"/write?db=lim", []byte(body))
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, code, msg[:min(len(msg), 512)])
		require.Contains(t, msg, "partial write: unable to parse 'big,host=aaaa")
		require.Contains(t, msg, "write-max-tag-value-bytes")
		require.Contains(t, msg, "dropped=1")
		require.Less(t, len(msg), 2048, "the error quotes the line cut short")
	}
	// Every shard still takes writes (a few series cover both).
	var more strings.Builder
	for i := range 50 {
		fmt.Fprintf(&more, "after,i=%d v=%d 3\n", i, i)
	}
	code, msg, err := postData(p.client, "http://"+p.addr+"/write?db=lim", []byte(more.String()))
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code, msg)
	code, res := influxQL(t, p.addr, "lim", `SELECT count(v) FROM good; SELECT count(v) FROM after; SHOW MEASUREMENTS`, "")
	require.Equal(t, 200, code)
	require.Equal(t, json.Number("4"), res.Results[0].Series[0].Values[0][1])
	require.Equal(t, json.Number("50"), res.Results[1].Series[0].Values[0][1])
	require.NotContains(t, fmt.Sprint(res.Results[2].Series[0].Values), "big")
	code, probs := p.get("/api/v1/problems")
	require.Equal(t, 200, code)
	require.NotContains(t, fmt.Sprint(probs), "flush_failing")
}
