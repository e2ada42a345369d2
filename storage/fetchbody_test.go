package storage_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/storage/client"
	"github.com/stretchr/testify/require"
)

// A leader reads a batched fetch however its JSON is spelled: as the
// client writes it, and as another client might (spaces, another field
// order, escapes); a body past the bound is refused.
func TestFetchBodySpellings(t *testing.T) {
	store, sm := memState(t)
	_, addr, _ := countedLeader(t, sm, store, nil)

	post := func(body []byte) (int, []byte) {
		resp, err := httpClient().Post("http://"+addr+"/internal/v1/fetch", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	// Neither shard is hosted here: each answers a 404 record at once.
	want := client.AppendFetchRecord(nil, 0, client.FetchError, http.StatusNotFound, nil)
	want = client.AppendFetchRecord(want, 1, client.FetchError, http.StatusNotFound, nil)
	for _, body := range []string{
		`{"node":"F","wait_ms":0,"shards":[{"db":"d","shard":0,"term":1,"after":0,"after_term":0},{"db":"e","shard":3,"term":1,"after":0,"after_term":0}]}`,
		`{ "shards": [ {"shard":0, "db":"\u0064", "term":1}, {"db":"e","shard":3,"term":1} ], "wait_ms": 0, "node": "F" }` + "\n",
	} {
		status, got := post([]byte(body))
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, want, got, body)
	}
	for _, body := range []string{
		`{"node":"F","wait_ms":0,"shards":[]}`,
		`{"node":"F","wait_ms":0,"shards":[{"db":"d","shard":0,"term":1,"after":0,"after_term":0}]`,
		`{"node":"F","wait_ms":0,"shards":[{"db":"d"}],"pad":"` + strings.Repeat("x", 4<<20) + `"}`,
	} {
		status, _ := post([]byte(body))
		require.Equal(t, http.StatusBadRequest, status, body[:min(len(body), 80)])
	}
}
