package broker

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestWriteTimeoutEndsAFrozenLeadersWrite: a leader that never answers
// holds a write only until WriteTimeout; the write then answers 503 naming
// the flag and the leader, and every attempt is abandoned.
func TestWriteTimeoutEndsAFrozenLeadersWrite(t *testing.T) {
	const shards = 4
	frozen, arrived, abandoned := frozenLeader(t)
	pub := newPublisher(ledBy(shards, "n1", 3, map[string]string{"n1": strings.TrimPrefix(frozen.URL, "http://")}))
	d := &Data{State: pub.State, Changed: pub.Changed, Client: &http.Client{}, WriteTimeout: 300 * time.Millisecond}
	sent, done := writeUntilAllArrive(t, context.Background(), d, shards, arrived)
	err := awaitWrite(t, done, "the write outlived --write-timeout")
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Contains(t, err.Error(), "no write within --write-timeout 300ms")
	require.Contains(t, err.Error(), "leader n1 did not answer in time")
	require.Eventually(t, func() bool { return abandoned.Load() == sent }, 10*time.Second, 5*time.Millisecond,
		"every attempt was abandoned at the timeout")
}

// offlineShard is database "db" of one shard, offline, placed on replicas,
// with live the live nodes of its cluster.
func offlineShard(replicas []string, live ...string) *statemachine.State {
	st := ledBy(1, "", 0, nil)
	st.ShardStates = statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db",
		Shards: []models.ShardState{{ID: 0, Leader: replicas[0], Term: 4, Status: models.StatusOffline}}}})
	st.Assignments = statemachine.MapOf(map[string]models.Assignment{"db": {DB: "db", Cluster: "default",
		Shards: []models.ShardAssignment{{ID: 0, Replicas: replicas}}}})
	nodes := map[string]models.StorageNode{}
	for _, id := range live {
		nodes[id] = models.StorageNode{NodeID: id, NodeAddress: "127.0.0.1:1"}
	}
	st.Nodes = statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": nodes})
	return st
}

// TestWriteToAShardWithNoLiveReplicaFailsAtOnce: no failover can bring a
// shard back before one of its replicas is live again, so the write does
// not wait: it answers 503 naming the replicas that are down, although the
// timeout is an hour and the state never changes.
func TestWriteToAShardWithNoLiveReplicaFailsAtOnce(t *testing.T) {
	pub := newPublisher(offlineShard([]string{"n1", "n2"}, "n3"))
	d := &Data{State: pub.State, Changed: pub.Changed, Client: &http.Client{}, WriteTimeout: time.Hour}
	done := make(chan error, 1)
	go func() { done <- d.Write(context.Background(), "db", "ns", []byte("cpu v=1 1")) }()
	err := awaitWrite(t, done, "a write to a shard with no live replica waited")
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Contains(t, err.Error(), `shard 0 of "db" has no live replica (n1, n2 down)`)
}

// TestWriteWaitsForAnOfflineShardWithALiveReplica: a live replica may be
// made leader, so the write waits for it, but only until WriteTimeout; the
// answer then names the flag and the shard's state.
func TestWriteWaitsForAnOfflineShardWithALiveReplica(t *testing.T) {
	pub := newPublisher(offlineShard([]string{"n1", "n2"}, "n2"))
	d := &Data{State: pub.State, Changed: pub.Changed, Client: &http.Client{}, WriteTimeout: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- d.Write(context.Background(), "db", "ns", []byte("cpu v=1 1")) }()
	err := awaitWrite(t, done, "the write outlived --write-timeout")
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Contains(t, err.Error(), "no write within --write-timeout 300ms")
	require.Contains(t, err.Error(), `shard 0 of "db" is offline (no live leader)`)
}

// TestWriteTimeoutDefault: unset, a write waits at most 4 s, under the 5 s
// timeouts of Telegraf and the Influx Go clients.
func TestWriteTimeoutDefault(t *testing.T) {
	require.Equal(t, 4*time.Second, (&Data{}).writeTimeout())
	require.Equal(t, 250*time.Millisecond, (&Data{WriteTimeout: 250 * time.Millisecond}).writeTimeout())
}
