package broker_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/require"
)

// TestDeleteWaitsForEveryReplicaToSpeakDeletes: during a rolling upgrade a
// live replica of the database on a release before deletes (protocol 2)
// could not apply the delete entry its leader logs, so the delete is
// refused with that node named and nothing is sent; once the node speaks
// protocol 3 the same delete goes to the leader.
func TestDeleteWaitsForEveryReplicaToSpeakDeletes(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	state := func(oldProto int) *statemachine.State {
		return &statemachine.State{
			Databases: statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: 1, ReplicaFactor: 2}}),
			Assignments: statemachine.MapOf(map[string]models.Assignment{"db": {DB: "db", Cluster: "default",
				Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1", "n2"}}}}}),
			ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db",
				Shards: []models.ShardState{{ID: 0, Leader: "n1", Term: 2, Status: models.StatusOnline}}}}),
			Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {
				"n1": {NodeID: "n1", NodeAddress: strings.TrimPrefix(srv.URL, "http://"), Protocol: models.ProtocolVersion},
				"n2": {NodeID: "n2", NodeAddress: "127.0.0.1:1", Protocol: oldProto},
			}}),
		}
	}
	st := state(2)
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Client: http.DefaultClient, WriteTimeout: 5 * time.Second, Self: "broker"}
	del := &wire.Delete{Metric: "cpu", Min: math.MinInt64, Max: 1_700_000_000_000_000_000}

	err := d.Delete(context.Background(), "db", del)
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Contains(t, err.Error(), "n2")
	require.Contains(t, err.Error(), "nothing was deleted")
	require.Zero(t, sent.Load(), "a delete was sent while a replica cannot apply it")

	st = state(0) // a record without the field: release 0.1.0
	require.ErrorIs(t, d.Delete(context.Background(), "db", del), models.ErrUnavailable)

	st = state(models.ProtocolDeletes)
	require.NoError(t, d.Delete(context.Background(), "db", del))
	require.Equal(t, int32(1), sent.Load())
}
