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
