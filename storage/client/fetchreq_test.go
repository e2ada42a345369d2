package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// agreesWithJSON checks that DecodeFetchRequest reads b as encoding/json
// does: the same request, or an error from both.
func agreesWithJSON(t *testing.T, b []byte) {
	t.Helper()
	var want FetchRequest
	werr := json.Unmarshal(b, &want)
	got, err := DecodeFetchRequest(b)
	if werr != nil {
		require.Error(t, err, "%q", b)
		return
	}
	require.NoError(t, err, "%q", b)
	require.Equal(t, want, got, "%q", b)
}

// The body the client sends for a batched fetch is read without
// encoding/json's decoder, and to the same request.
func TestFetchBodiesTakeTheScan(t *testing.T) {
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		bodies = append(bodies, b)
	}))
	defer srv.Close()
	sent := []FetchRequest{
		{Node: "f-1", WaitMS: 10_000, Shards: []FetchShard{{DB: "db_7", Shard: 31, Term: 4, After: 1234, AfterTerm: 3}, {DB: "a", Shard: 0}}},
		{Node: "N", WaitMS: 0, Shards: []FetchShard{{DB: "x", Shard: math.MaxInt64, Term: math.MaxInt64, After: math.MaxUint64, AfterTerm: math.MaxUint64}}},
		{Node: "n", WaitMS: -1},
	}
	peer := Peer{ID: "n1", Address: strings.TrimPrefix(srv.URL, "http://")}
	for _, r := range sent {
		ans, err := New(http.DefaultClient).Fetch(context.Background(), peer, r)
		require.NoError(t, err)
		require.NoError(t, ans.Close())
	}
	require.Len(t, bodies, len(sent))
	for i, b := range bodies {
		got, ok := scanFetchRequest(b)
		require.True(t, ok, "the client's body %q is read by the scan", b)
		require.Equal(t, sent[i], got)
		agreesWithJSON(t, b)
	}
}

// Every other spelling of a request (another client's) is read as
// encoding/json reads it.
func TestDecodeFetchRequestReadsAsJSONDoes(t *testing.T) {
	for _, b := range []string{
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4}]}`,
		`{"node":"a","wait_ms":5,"shards":[]}`,
		`{"node":"a","wait_ms":5,"shards":null}`,
		` {"node":"a","wait_ms":5,"shards":[]}` + "\n",
		`{"wait_ms":5,"node":"a","shards":[{"after":3,"db":"d"}]}`,
		`{"Node":"a","WAIT_MS":5,"shards":[{"DB":"d"}]}`,
		`{"node":"a\u0062","wait_ms":5,"shards":[{"db":"d\"q","shard":1,"term":2,"after":3,"after_term":4}]}`,
		`{"node":"é","wait_ms":5,"shards":[{"db":"` + "\xff" + `","shard":1,"term":2,"after":3,"after_term":4}]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4,"x":1}]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4}],"node":"b"}`,
		`{"node":"a","wait_ms":1.5,"shards":[]}`,
		`{"node":"a","wait_ms":1e3,"shards":[]}`,
		`{"node":"a","wait_ms":05,"shards":[]}`,
		`{"node":"a","wait_ms":-0,"shards":[]}`,
		`{"node":"a","wait_ms":-,"shards":[]}`,
		`{"node":"a","wait_ms":9223372036854775808,"shards":[]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":-3,"after_term":4}]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":18446744073709551616,"after_term":4}]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4},]}`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4}{"db":"e"}]}`,
		`{"node":"a","wait_ms":5,"shards":[]}x`,
		`{"node":"a","wait_ms":5,"shards":[]`,
		`{"node":"a","wait_ms":5,"shards":[{"db":"d"`,
		`{"node":"a`,
		``,
		`null`,
	} {
		agreesWithJSON(t, []byte(b))
	}
}

func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add([]byte(`{"node":"a","wait_ms":5,"shards":[{"db":"d","shard":1,"term":2,"after":3,"after_term":4}]}`))
	f.Add([]byte(`{"node":"a","wait_ms":-5,"shards":[{"db":"d","shard":-1,"term":0,"after":0,"after_term":0},{"db":"e","shard":2,"term":1,"after":9,"after_term":1}]}`))
	f.Add([]byte(`{"node":"a","wait_ms":5,"shards":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		agreesWithJSON(t, b)
	})
}

// BenchmarkDecodeFetchRequest: a poll of 64 shards, read by the scan and
// by encoding/json's decoder (what the leader used before).
func BenchmarkDecodeFetchRequest(b *testing.B) {
	r := FetchRequest{Node: "agent-0042", WaitMS: 10_000}
	for i := range 64 {
		r.Shards = append(r.Shards, FetchShard{DB: fmt.Sprintf("db-%04d", i*13), Shard: i % 32, Term: 3, After: uint64(1000 + i), AfterTerm: 2})
	}
	body, err := json.Marshal(r)
	require.NoError(b, err)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeFetchRequest(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got FetchRequest
			if err := json.NewDecoder(strings.NewReader(string(body))).Decode(&got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A body of many shards is read whole by the scan, but the slice is sized
// from a bounded guess: a crafted body of 4 MiB of `{"db":` does not size
// a slice for ~700k shards.
func TestFetchScanGuessIsBounded(t *testing.T) {
	req := FetchRequest{Node: "n", WaitMS: 5}
	for i := range 3 * maxShardGuess {
		req.Shards = append(req.Shards, FetchShard{DB: "d", Shard: i, Term: 1, After: uint64(i)})
	}
	b, err := json.Marshal(req)
	require.NoError(t, err)
	got, ok := scanFetchRequest(b)
	require.True(t, ok)
	require.Equal(t, req, got)

	crafted := []byte(`{"node":"n","wait_ms":1,"shards":[` + strings.Repeat(`{"db":`, 100_000))
	s := fetchScan{b: crafted, i: len(`{"node":"n","wait_ms":1,"shards":[`)}
	require.Equal(t, maxShardGuess, s.countShards())
	_, err = DecodeFetchRequest(crafted)
	require.Error(t, err)
}

// EncodeFetchRequest writes what json.Marshal writes, byte for byte, for
// plain names (its own path) and any other (encoding/json's), and the
// scan reads its plain bodies back.
func TestEncodeFetchRequestIsJSONMarshal(t *testing.T) {
	reqs := []FetchRequest{
		{Node: "f-1", WaitMS: 10_000, Shards: []FetchShard{{DB: "db_7", Shard: 31, Term: 4, After: 1234, AfterTerm: 3}, {DB: "a", Shard: 0}}},
		{Node: "N", WaitMS: math.MinInt64, Shards: []FetchShard{{DB: "x", Shard: math.MaxInt64, Term: math.MinInt64, After: math.MaxUint64, AfterTerm: math.MaxUint64}}},
		{Node: "n", WaitMS: -1},
		{Node: "", Shards: []FetchShard{}},
		{Node: "n<1>", Shards: []FetchShard{{DB: "d"}}},
		{Node: "n", Shards: []FetchShard{{DB: "d\"b"}, {DB: "é"}}},
		{Node: "n", Shards: []FetchShard{{DB: "a&b", Shard: -3}}},
	}
	for _, r := range reqs {
		want, err := json.Marshal(r)
		require.NoError(t, err)
		got, err := EncodeFetchRequest(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		agreesWithJSON(t, got)
	}
	plain, err := EncodeFetchRequest(reqs[0])
	require.NoError(t, err)
	back, ok := scanFetchRequest(plain)
	require.True(t, ok)
	require.Equal(t, reqs[0], back)
}
