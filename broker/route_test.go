package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestRouteNamesTheShardWritesGoTo: the route API hashes the series key a
// write is routed by (tags sorted, field appended), not the text as given.
// It hashed "nem,s=s0" where writes hash "nem,s=s0#value": the nemesis put
// the loss of seed 1 (storage shard 4) on shard 6. Each series is written
// through the broker to a fake leader that records the shard it is sent to.
func TestRouteNamesTheShardWritesGoTo(t *testing.T) {
	const shards = 8
	var mu sync.Mutex
	var got []int
	shardOf := regexp.MustCompile(`/shards/db/(\d+)/write$`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := shardOf.FindStringSubmatch(r.URL.Path); m != nil {
			var n int
			_, _ = fmt.Sscan(m[1], &n)
			mu.Lock()
			got = append(got, n)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	states := make([]models.ShardState, shards)
	for i := range states {
		states[i] = models.ShardState{ID: i, Leader: "n1", Term: 3, Status: models.StatusOnline}
	}
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: shards, ReplicaFactor: 1}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: states}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"n1": {NodeID: "n1", NodeAddress: addr}}}),
	}
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Client: http.DefaultClient}
	cases := []struct{ series, line string }{
		{"nem,s=s0", "nem,s=s0 value=1 1"},
		{"nem,s=s13", "nem,s=s13 value=1 1"},
		{"cpu,host=a", "cpu,host=a value=1 1"},
		{"cpu,zone=z,host=a", "cpu,host=a,zone=z value=1 1"}, // tags in any order
		{"cpu,host=a#idle", "cpu,host=a idle=1 1"},
		{"mem", "mem value=1 1"},
	}
	for _, tc := range cases {
		mu.Lock()
		got = nil
		mu.Unlock()
		require.NoError(t, d.Write(context.Background(), "db", "ns", []byte(tc.line)), tc.line)
		r, err := d.Route("db", tc.series)
		require.NoError(t, err, tc.series)
		mu.Lock()
		require.Equal(t, []int{r.Shard}, got, "series %q, written as %q", tc.series, tc.line)
		mu.Unlock()
	}
	_, err := d.Route("db", "bad series,")
	require.ErrorIs(t, err, models.ErrBadInput)
}
