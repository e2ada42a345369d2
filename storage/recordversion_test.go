package storage_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// With a ReportVersion, the record's shard report (a map over every replica
// of the node) is asked again only when the version moved: looked at every
// MinRewrite, an idle node builds it once. A change with its version moved
// is written as before.
func TestNodeRecordAsksTheReportOnlyWhenItsVersionMoved(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ck := models.ClusterKeys{SNS: "/t/storage/default"}

	var mu sync.Mutex
	following := map[string]string{"d/0": "L"}
	var version, reports, looks atomic.Int64
	report := func() (int, map[string]string) {
		reports.Add(1)
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for k, v := range following {
			out[k] = v
		}
		return len(out), out
	}
	registered := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- storage.RunNode(ctx, storage.NodeConfig{Store: store, Keys: ck, NodeID: "n1", Address: "127.0.0.1:1", Cluster: "default",
			TTL: 2 * time.Second, MinRewrite: 5 * time.Millisecond, Report: report, Logger: zap.NewNop(),
			ReportVersion: func() uint64 { return uint64(version.Load()) },
			DiskFault:     func() *models.DiskFault { looks.Add(1); return nil }, // counts the looks at the record
			Registered:    func() { registered <- struct{}{} }})
	}()
	<-registered
	read := func() models.StorageNode {
		kvp, err := store.Get(ctx, ck.Node("n1"))
		require.NoError(t, err)
		require.NotNil(t, kvp)
		var rec models.StorageNode
		require.NoError(t, json.Unmarshal(kvp.Value, &rec))
		return rec
	}
	require.Equal(t, map[string]string{"d/0": "L"}, read().Following)

	want := looks.Load() + 10
	require.Eventually(t, func() bool { return looks.Load() >= want }, 10*time.Second, 2*time.Millisecond)
	require.EqualValues(t, 1, reports.Load(), "looked at %d times, the report was built once", looks.Load())

	mu.Lock()
	following["d/0"] = "M"
	following["d/1"] = "L"
	mu.Unlock()
	version.Add(1)
	require.Eventually(t, func() bool { return read().Following["d/0"] == "M" }, 10*time.Second, 5*time.Millisecond)
	rec := read()
	require.Equal(t, 2, rec.Hosted)
	require.Equal(t, map[string]string{"d/0": "M", "d/1": "L"}, rec.Following)
	want = looks.Load() + 10
	require.Eventually(t, func() bool { return looks.Load() >= want }, 10*time.Second, 2*time.Millisecond)
	require.EqualValues(t, 2, reports.Load(), "one more report for the one version move")
	cancel()
	require.NoError(t, <-done)
}

// A host's FollowingVersion moves when a replica opens and when the leader
// it follows changes, so the node record reports both.
func TestFollowingVersionMovesWithRolesAndReplicas(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	f := startNode(t, "F", sm, store)
	v0 := f.host.FollowingVersion()
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 3, UID: "u1"})
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d",
		models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L", "M", "F"}}}})
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}})
	require.Eventually(t, func() bool {
		_, following := f.host.Following()
		return following["d/0"] == "L"
	}, 10*time.Second, 5*time.Millisecond)
	v1 := f.host.FollowingVersion()
	require.Greater(t, v1, v0, "a replica opened and its role set")

	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "M", Term: 2, Status: models.StatusOnline}}})
	require.Eventually(t, func() bool {
		_, following := f.host.Following()
		return following["d/0"] == "M"
	}, 10*time.Second, 5*time.Millisecond)
	require.Greater(t, f.host.FollowingVersion(), v1, "the followed leader changed")
}
