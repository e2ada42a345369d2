package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A leader's in-sync set writes are fenced on the database's shard states
// as read from etcd. When the node's watched state shows that very record
// (same etcd cluster, same mod revision), the fence takes it from there and
// the record is not decoded again: placing a database cost one decode of
// its whole record per shard leader. A state that did not come from
// watching that etcd (nothing to tie it to the read) still has the read
// decoded, and both write the same sets.
func TestISRFenceTakesWatchedStates(t *testing.T) {
	const ns = "/t"
	keys := models.Keys{NS: ns}
	ck := models.ClusterKeys{SNS: ns + "/storage/default"}
	for _, tc := range []struct {
		name    string
		watched bool // the state manager watches etcd (else it is told by hand)
	}{
		{name: "watched: taken from the state", watched: true},
		{name: "told by hand: decoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := etcdtest.Start(t).Store(t)
			cid, err := store.ClusterID(ctx)
			require.NoError(t, err)
			sm := statemachine.New(statemachine.Config{})
			sm.Start(ctx)
			defer sm.Stop()
			h := leaderHost(t, store, sm, ck, keys, "F")

			raw := func(v any) []byte { b, _ := json.Marshal(v); return b }
			db := models.Database{Name: "d", StorageCluster: "default", NumShards: 2, ReplicaFactor: 2, UID: "u1"}
			states := models.ShardStates{DB: "d", UID: "u1", Shards: []models.ShardState{
				{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}, {ID: 1, Leader: "L", Term: 1, Status: models.StatusOnline}}}
			assign := models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{
				{ID: 0, Replicas: []string{"L", "F"}}, {ID: 1, Replicas: []string{"L", "F"}}}}
			first := models.ISR{Leader: "L", Term: 1, Replicas: []string{"L", "F"}, ClusterID: cid}
			ok, rev0, err := store.Txn(ctx, nil, []kv.Op{
				kv.OpPut(keys.StorageConfig("default"), raw(models.StorageCluster{Name: "default"}), 0),
				kv.OpPut(keys.DatabaseConfig("d"), raw(db), 0), kv.OpPut(keys.ShardState("d"), raw(states), 0),
				kv.OpPut(keys.Assign("d"), raw(assign), 0),
				kv.OpPut(ck.ISR("d", 0), raw(first), 0), kv.OpPut(ck.ISR("d", 1), raw(first), 0)})
			require.NoError(t, err)
			require.True(t, ok)
			if tc.watched {
				for _, src := range statemachine.MainSources(store, keys) {
					sm.AddSource(src)
				}
				require.Eventually(t, func() bool {
					st := sm.Snapshot()
					return st.ModRev(statemachine.SourceShardState, "d") == rev0 && st.ModRev(statemachine.SourceAssign, "d") == rev0
				}, 10*time.Second, 10*time.Millisecond)
			} else {
				put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
				put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d", db)
				put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", assign)
				put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d", states)
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			events := store.Watch(wctx, ck.ISR("d", 0), rev0+1)

			hctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); h.Run(hctx) }()
			defer func() { cancel(); <-done }()

			// F leaves shard 0: its leader writes the set without it, fenced
			// on the states (the first sets were adopted, fenced too).
			// A new value: the state told by hand holds the old one's shards.
			assign = models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{
				{ID: 0, Replicas: []string{"L"}}, {ID: 1, Replicas: []string{"L", "F"}}}}
			_, err = store.Put(ctx, keys.Assign("d"), raw(assign), 0)
			require.NoError(t, err)
			if !tc.watched {
				put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", assign)
			}
			var last models.ISR
			require.Eventually(t, func() bool {
				for {
					select {
					case resp := <-events:
						for _, ev := range resp.Events {
							require.NoError(t, json.Unmarshal(ev.KV.Value, &last))
						}
						continue
					default:
					}
					return len(last.Replicas) == 1
				}
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, models.ISR{Leader: "L", Term: 1, Replicas: []string{"L"}, ClusterID: cid}, last)
			if tc.watched {
				require.Zero(t, h.StatesDecoded(), "shard-state records decoded though the watched state showed them")
			} else {
				require.Positive(t, h.StatesDecoded())
			}
		})
	}
}
