package meta_test

import (
	"context"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// fixedState is a snapshot with cluster "default" and three live nodes.
func fixedState(t testing.TB) func() *statemachine.State {
	m := statemachine.New(statemachine.Config{})
	for _, id := range []string{"n1", "n2", "n3"} {
		m.Push(statemachine.Event{Source: "nodes/default", Kind: statemachine.KindStorageNodes, Cluster: "default",
			Type: kv.WatchPut, Name: id, Value: models.StorageNode{NodeID: id}})
	}
	m.Push(statemachine.Event{Source: statemachine.SourceStorageConfig, Kind: statemachine.KindStorageConfig,
		Type: kv.WatchPut, Name: "default", Value: models.StorageCluster{Name: "default"}})
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	require.Eventually(t, func() bool { return m.Snapshot().Nodes.At("default").Len() == 3 }, 5e9, 1e6)
	return m.Snapshot
}

// FuzzCreateDatabase: any body either creates exactly one valid database
// config or is refused with a mapped error and writes nothing.
func FuzzCreateDatabase(f *testing.F) {
	for _, s := range []string{
		`{"name":"db1","num_shards":4,"replica_factor":3}`,
		`{"name":"db1","num_shards":0}`,
		`{"name":"bad name","num_shards":1}`,
		`{"name":"db","num_shards":1,"replica_factor":9}`,
		`{"name":"db","num_shards":1,"storage_cluster":"nope"}`,
		`{"name":"db","num_shards":1,"bogus":1}`,
		`{"name":"db","num_shards":1,"options":{"ttl":"7d"}}`,
		`{"name":"db","num_shards":1,"retention":"2h","partition":"1h","ahead":"1h","behead":"1d"}`,
		`{"name":"db","num_shards":1,"retention":"2h","partition":"3h"}`,
		`{"name":"db","num_shards":1,"retention":"30x"}`,
		`{"name":"db","num_shards":1,"retention":7}`,
		`{`, `[]`, `null`, `{"name":"db","num_shards":1}{}`,
	} {
		f.Add([]byte(s))
	}
	state := fixedState(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		store := kv.NewMemoryStore()
		defer store.Close()
		keys := models.Keys{NS: "/cairn"}
		a := &meta.Admin{Store: store, Keys: keys, State: state}
		ctx := context.Background()
		var db models.Database
		err := web.DecodeStrictJSON(body, &db)
		if err == nil {
			db, err = a.CreateDatabase(ctx, db)
		}
		kvs, _, lerr := store.List(ctx, "/cairn/")
		require.NoError(t, lerr)
		if err != nil {
			require.Empty(t, kvs, "a refused DDL wrote %v", kvs)
			return
		}
		require.Len(t, kvs, 1)
		require.Equal(t, keys.DatabaseConfig(db.Name), kvs[0].Key)
		require.True(t, models.ValidName(db.Name))
		require.GreaterOrEqual(t, db.NumShards, 1)
		require.LessOrEqual(t, db.ReplicaFactor, 3)
	})
}
