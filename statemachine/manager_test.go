package statemachine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func sources(s kv.Store, k models.Keys) []statemachine.Source {
	return []statemachine.Source{
		{Name: "master", Store: s, Prefix: k.Master(), Kind: statemachine.KindMaster},
		{Name: "databases", Store: s, Prefix: k.DatabaseConfigPrefix(), Kind: statemachine.KindDatabaseConfig},
	}
}

func TestManagerFollowsStoreAndBacksUp(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	k := models.Keys{NS: "/cairn"}
	ctx := context.Background()
	_, err := store.Put(ctx, k.DatabaseConfig("db1"), mustJSON(t, models.Database{Name: "db1", NumShards: 3}), 0)
	require.NoError(t, err)
	rev, err := store.Put(ctx, k.Master(), mustJSON(t, models.MasterRecord{NodeID: "m1"}), 0)
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "state.backup")
	m := statemachine.New(statemachine.Config{BackupPath: path, BackupWait: 10 * time.Millisecond})
	changed := m.Changed()
	m.Start(ctx)
	for _, src := range sources(store, k) {
		m.AddSource(src)
	}
	require.Eventually(t, func() bool {
		s := m.Snapshot()
		return s.Master != nil && s.Master.Term == rev && s.Databases.Len() == 1
	}, 5*time.Second, 5*time.Millisecond)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change notification")
	}
	_, err = store.Put(ctx, k.DatabaseConfig("db2"), mustJSON(t, models.Database{Name: "db2"}), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.Snapshot().Databases.Len() == 2 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		f, err := statemachine.ReadBackupFile(path)
		return err == nil && f != nil && len(f.Sources["databases"].KVs) == 2
	}, 5*time.Second, 10*time.Millisecond)
	m.Stop()

	// Restart while the store is down: the backup serves.
	store.SetDown(true)
	m2 := statemachine.New(statemachine.Config{BackupPath: path})
	loaded, err := m2.LoadBackup()
	require.NoError(t, err)
	require.True(t, loaded)
	m2.Start(ctx)
	defer m2.Stop()
	for _, src := range sources(store, k) {
		m2.AddSource(src)
	}
	s := m2.Snapshot()
	require.True(t, s.FromBackup)
	require.Len(t, s.Databases.ToMap(), 2)
	require.Equal(t, "m1", s.Master.NodeID)
	require.EqualValues(t, rev, s.Master.Term)

	// Meanwhile db1 was dropped; when the store returns, state converges.
	store.SetDown(false)
	_, err = store.Delete(ctx, k.DatabaseConfig("db1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := m2.Snapshot()
		_, has1 := s.Databases.Get("db1")
		return !has1 && s.Databases.Len() == 1 && !s.FromBackup
	}, 10*time.Second, 10*time.Millisecond)
}

func TestManagerRemoveSource(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	ctx := context.Background()
	ck := models.ClusterKeys{SNS: "/cairn/storage/c1"}
	_, err := store.Put(ctx, ck.Node("n1"), mustJSON(t, models.StorageNode{NodeID: "n1"}), 0)
	require.NoError(t, err)
	m := statemachine.New(statemachine.Config{})
	m.Start(ctx)
	defer m.Stop()
	m.AddSource(statemachine.Source{Name: "nodes/c1", Store: store, Prefix: ck.NodesPrefix(), Kind: statemachine.KindStorageNodes, Cluster: "c1"})
	require.Eventually(t, func() bool { return m.Snapshot().Nodes.At("c1").Len() == 1 }, 5*time.Second, 5*time.Millisecond)
	m.RemoveSource("nodes/c1")
	require.Eventually(t, func() bool { _, ok := m.Snapshot().Nodes.Get("c1"); return !ok }, 5*time.Second, 5*time.Millisecond)
}
