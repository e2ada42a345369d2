package storage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A change of one database makes a host look at that database's replicas
// here, not at every replica it hosts: it walked all of them (twice) on
// every database event, so placing a database cost each of its hosts
// O(hosted). A replica the changed database no longer wants here stops
// serving all the same (it is kept for the drop delay).
func TestReconcileLooksAtTheChangedDatabase(t *testing.T) {
	const dbs = 60
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	one := func(db string, shards int, nodes ...string) models.Assignment {
		a := models.Assignment{DB: db, Cluster: "default"}
		for i := range shards {
			a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: nodes})
		}
		return a
	}
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for i := range dbs {
		db := fmt.Sprintf("db%02d", i)
		put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", db,
			models.Database{Name: db, StorageCluster: "default", NumShards: 1, ReplicaFactor: 1})
		put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", db, one(db, 1, "A"))
	}
	// A follows db01's shard, led by B.
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "db01", one("db01", 1, "A", "B"))
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "db01",
		models.ShardStates{DB: "db01", Shards: []models.ShardState{{ID: 0, Leader: "B", Term: 1, Status: models.StatusOnline}}})
	n := startNode(t, "A", sm, kv.NewMemoryStore())
	require.Eventually(t, func() bool {
		hosted, following := n.host.Following()
		return hosted == dbs && following[models.ShardID("db01", 0)] == "B"
	}, 10*time.Second, 10*time.Millisecond)
	before := n.host.Looked()

	// db00 grows a shard here; db01 moves away.
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "db00", one("db00", 2, "A"))
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "db01", one("db01", 1, "B"))
	require.Eventually(t, func() bool {
		hosted, following := n.host.Following()
		_, still := following[models.ShardID("db01", 0)]
		return hosted == dbs+1 && !still
	}, 10*time.Second, 10*time.Millisecond)
	looked := n.host.Looked() - before
	t.Logf("two databases changed: %d replicas looked at of %d hosted", looked, dbs+1)
	require.LessOrEqual(t, looked, int64(8), "a database's event costs the host every replica it hosts")
}
