package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/stretchr/testify/require"
)

// oneShard is a state with database "db" of one shard led by n1 at addr.
func oneShard(addr string) *statemachine.State {
	return &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: 1, ReplicaFactor: 2}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: []models.ShardState{{ID: 0, Leader: "n1", Term: 3, Status: models.StatusOnline}}}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"n1": {NodeID: "n1", NodeAddress: addr}}}),
	}
}

// refusingLeader answers every write with refuse's envelope and counts them.
func refusingLeader(t *testing.T, refuse error, calls *atomic.Int32) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		status, body := models.Envelope(refuse)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestWriteRefusalByCode: too few in-sync replicas ends the write at the
// first answer (the code says so, no message is read); a stale term is
// retried until the retry window closes. Both answer the client 503.
func TestWriteRefusalByCode(t *testing.T) {
	never := make(chan struct{})
	cases := []struct {
		name    string
		refuse  error
		retried bool
	}{
		{"not enough in-sync replicas is final", storage.ErrNotEnoughISR, false},
		{"a stale term is retried", storage.ErrStaleTerm, true},
		{"an ack timeout is retried", storage.ErrAckTimeout, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			st := oneShard(refusingLeader(t, tc.refuse, &calls))
			d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
				Client: http.DefaultClient, WriteTimeout: 1500 * time.Millisecond} // long enough for a first answer on a loaded machine
			err := d.Write(context.Background(), "db", "ns", []byte("cpu v=1 1"))
			require.ErrorIs(t, err, models.ErrUnavailable)
			require.NotErrorIs(t, err, models.ErrStaleTerm, "a peer's code is not the client's")
			status, code := models.StatusOf(err)
			require.Equal(t, http.StatusServiceUnavailable, status)
			require.Equal(t, "unavailable", code)
			require.Contains(t, err.Error(), tc.refuse.Error())
			if tc.retried {
				require.Greater(t, calls.Load(), int32(1))
			} else {
				require.Equal(t, int32(1), calls.Load())
			}
		})
	}
}
