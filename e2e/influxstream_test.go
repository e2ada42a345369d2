package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// streamChunk is one line of a chunked /query answer.
type streamChunk struct {
	Results []struct {
		StatementID int    `json:"statement_id"`
		Partial     bool   `json:"partial"`
		Error       string `json:"error"`
		Series      []struct {
			Name    string   `json:"name"`
			Columns []string `json:"columns"`
			Values  [][]any  `json:"values"`
			Partial bool     `json:"partial"`
		} `json:"series"`
	} `json:"results"`
}

// TestInfluxChunkedRawSelect: 300,000 points of 30 series over 4 shards,
// asked for whole with chunked=true, come back in chunks of chunk_size
// rows, partial on all but the last, every point once in time order; in
// reverse with ORDER BY time DESC.
func TestInfluxChunkedRawSelect(t *testing.T) {
	const series, perSeries = 30, 10_000
	const base = int64(1_700_000_000_000_000_000)
	p := startInfluxStandalone(t, map[string]int{"big": 4})
	// Host h's point j is at base + j s + h ns, so every row is one point.
	for j0 := 0; j0 < perSeries; j0 += 1000 {
		var body bytes.Buffer
		for j := j0; j < j0+1000; j++ {
			for h := range series {
				fmt.Fprintf(&body, "s,host=h%02d v=%d.5 %d\n", h, j*series+h, base+int64(j)*1e9+int64(h))
			}
		}
		resp, err := http.Post("http://"+p.addr+"/write?db=big", "text/plain", &body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	for _, desc := range []bool{false, true} {
		q := "SELECT * FROM s"
		if desc {
			q += " ORDER BY time DESC"
		}
		resp, err := http.Get("http://" + p.addr + "/query?" + url.Values{"db": {"big"}, "q": {q}, "epoch": {"ns"},
			"chunked": {"true"}, "chunk_size": {"10000"}}.Encode())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		var chunks []streamChunk
		for sc.Scan() {
			var c streamChunk
			dec := json.NewDecoder(strings.NewReader(sc.Text()))
			dec.UseNumber()
			require.NoError(t, dec.Decode(&c))
			chunks = append(chunks, c)
		}
		require.NoError(t, sc.Err())
		resp.Body.Close()
		require.Len(t, chunks, series*perSeries/10_000, q)
		n := 0
		for i, c := range chunks {
			last := i == len(chunks)-1
			require.Len(t, c.Results, 1)
			r := c.Results[0]
			require.Empty(t, r.Error)
			require.Equal(t, !last, r.Partial)
			require.Len(t, r.Series, 1)
			s := r.Series[0]
			require.Equal(t, "s", s.Name)
			require.Equal(t, []string{"time", "host", "v"}, s.Columns)
			require.Equal(t, !last, s.Partial)
			require.Len(t, s.Values, 10_000)
			for _, row := range s.Values {
				k := n // the k-th point in time order
				if desc {
					k = series*perSeries - 1 - n
				}
				j, h := k/series, k%series
				want := []any{json.Number(fmt.Sprint(base + int64(j)*1e9 + int64(h))), fmt.Sprintf("h%02d", h), json.Number(fmt.Sprintf("%d.5", k))}
				require.Equal(t, want, row, "row %d of %s", n, q)
				n++
			}
		}
		require.Equal(t, series*perSeries, n)
	}
}
