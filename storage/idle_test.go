package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// TestUnassignedReplicaDroppedWhileIdle: a host whose loop sleeps between
// full passes when nothing needs one still wakes, with no further change of
// state, to drop a replica unassigned from it once the drop delay has run:
// its next full pass is at that drop (at least 1 s after the last one).
func TestUnassignedReplicaDroppedWhileIdle(t *testing.T) {
	store, sm := memState(t)
	dir := t.TempDir()
	eng, err := engine.NewBoltEngine(dir)
	require.NoError(t, err)
	h := storage.NewHost(storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		LagBound: 500 * time.Millisecond, AckTimeout: 5 * time.Second, DropDelay: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = eng.Close() })

	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1, UID: "u1"})
	assign := func(node string) {
		put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d",
			models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{node}}}})
	}
	assign("L")
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}})
	for _, src := range []string{statemachine.SourceAssign, statemachine.SourceDatabaseConfig} {
		sm.Push(statemachine.Event{Source: src, Type: kv.WatchSynced})
	}
	require.Eventually(t, func() bool { return h.Write(ctx, "d", 0, 1, points(0, 10)) == nil }, 5*time.Second, 10*time.Millisecond)

	assign("X") // the shard moves away; nothing changes after this
	// The host forgets the replica, then the engine closes and removes
	// its file: an Open before that would meet the old file's lock.
	file := filepath.Join(dir, "d", "0.db")
	require.FileExists(t, file)
	require.Eventually(t, func() bool {
		n, _ := h.Following()
		_, err := os.Stat(file)
		return n == 0 && errors.Is(err, os.ErrNotExist)
	}, 5*time.Second, 10*time.Millisecond, "the unassigned replica was dropped once the drop delay ran")
	s, err := eng.Open("d", 0) // a new, empty shard: the old one's data is gone
	require.NoError(t, err)
	last, _ := s.LastEntry()
	require.Zero(t, last, "the dropped replica's log is gone")
}
