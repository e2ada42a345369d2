package storage_test

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// An idle storage node writes its record once: being looked at again (every
// MinRewrite) rewrites nothing while the content is the same; a real change (a followed leader) is written once, with
// last_updated moved to the time of that change. Against a real etcd, so the
// revisions counted are etcd's.
func TestNodeRecordWrittenOnlyOnChange(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ck := models.ClusterKeys{SNS: "/t/storage/default"}

	var mu sync.Mutex
	following := map[string]string{"d/0": "L"}
	var looks atomic.Int64
	report := copyReport(&mu, following, &looks)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	registered := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- storage.RunNode(ctx, storage.NodeConfig{Store: store, Keys: ck, NodeID: "n1", Address: "127.0.0.1:1", Cluster: "default",
			TTL: 2 * time.Second, MinRewrite: 5 * time.Millisecond, Report: report, Logger: zap.NewNop(), Now: now,
			Registered: func() { registered <- struct{}{} }})
	}()
	<-registered
	read := func() (models.StorageNode, *kv.KeyValue) {
		kvp, err := store.Get(ctx, ck.Node("n1"))
		require.NoError(t, err)
		require.NotNil(t, kvp)
		var rec models.StorageNode
		require.NoError(t, json.Unmarshal(kvp.Value, &rec))
		return rec, kvp
	}
	first, kvp := read()
	require.Equal(t, map[string]string{"d/0": "L"}, first.Following)
	require.Equal(t, 1, first.Hosted)
	require.Equal(t, models.ProtocolVersion, first.Protocol, "the record advertises the protocol the node speaks")
	require.Equal(t, clock.Load(), first.LastUpdated)
	require.Empty(t, first.LastTxnID, "last txn ids are asked for at failover, not kept in etcd")

	// Nothing changed: looked at again and again, never rewritten.
	clock.Add(int64(time.Minute / time.Microsecond))
	want := looks.Load() + 5
	require.Eventually(t, func() bool { return looks.Load() >= want }, 10*time.Second, 2*time.Millisecond)
	again, kv2 := read()
	require.Equal(t, kvp.ModRev, kv2.ModRev, "an unchanged record is not rewritten")
	require.Equal(t, first.LastUpdated, again.LastUpdated)

	// A followed shard changes leader: one rewrite, last_updated = then.
	mu.Lock()
	following["d/0"] = "M"
	mu.Unlock()
	require.Eventually(t, func() bool {
		rec, _ := read()
		return rec.Following["d/0"] == "M"
	}, 10*time.Second, 5*time.Millisecond)
	rec, kv3 := read()
	require.Greater(t, kv3.ModRev, kv2.ModRev)
	require.Equal(t, clock.Load(), rec.LastUpdated, "last_updated is the time of the last real change")
	cancel()
	require.NoError(t, <-done)
}

// With a ReportVersion, the record's shard report (a map over every replica
// of the node) is asked again only when the version moved: looked at every
// MinRewrite, an idle node builds it once. A change with its version moved
// is written as before.
func TestNodeRecordAsksTheReportOnlyWhenItsVersionMoved(t *testing.T) {
	var mu sync.Mutex
	var version, reports, looks atomic.Int64
	following := map[string]string{"d/0": "L"}
	report := copyReport(&mu, following, &reports)
	store, ck := etcdtest.Start(t).Store(t), models.ClusterKeys{SNS: "/t/storage/default"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	publishShard(sm, []string{"L", "M", "F"}, "L", 1)
	followsLeader(t, f, "L")
	v1 := f.host.FollowingVersion()
	require.Greater(t, v1, v0, "a replica opened and its role set")

	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "M", Term: 2, Status: models.StatusOnline}}})
	followsLeader(t, f, "M")
	require.Greater(t, f.host.FollowingVersion(), v1, "the followed leader changed")
}

// followsLeader waits until f reports following leader for d/0.
func followsLeader(t *testing.T, f *node, leader string) {
	require.Eventually(t, func() bool {
		_, following := f.host.Following()
		return following["d/0"] == leader
	}, 10*time.Second, 5*time.Millisecond)
}

// copyReport reports a copy of following, read under mu, counting its calls.
func copyReport(mu *sync.Mutex, following map[string]string, calls *atomic.Int64) storage.ShardReport {
	return func() (int, map[string]string) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return len(following), maps.Clone(following)
	}
}
