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

// A new leader that finds on record exactly the set it would publish (the
// master writes a new database's first sets with its placement) adopts it:
// it writes nothing, and leads with it (a follower leaving the assignment
// is dropped from it, fenced on the adopted record): one write of the set
// in all, the shrink; without adoption there would be two. A set that
// differs from the one it would publish (a member not live) is written.
func TestLeaderAdoptsIdenticalFirstSet(t *testing.T) {
	const ns = "/t"
	keys := models.Keys{NS: ns}
	ck := models.ClusterKeys{SNS: ns + "/storage/default"}
	for _, tc := range []struct {
		name  string
		fDead bool // F has no live record: the leader's set is itself alone
	}{
		{name: "identical: adopted"},
		{name: "a member not live: written", fDead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := etcdtest.Start(t).Store(t)
			cid, err := store.ClusterID(ctx)
			require.NoError(t, err)
			sm := statemachine.New(statemachine.Config{})
			sm.Start(ctx)
			defer sm.Stop()
			var others []string
			if !tc.fDead {
				others = []string{"F"}
			}
			h := leaderHost(t, store, sm, ck, keys, others...)

			states := models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}}
			assign := models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"F", "L"}}}}
			first := models.ISR{Leader: "L", Term: 1, Replicas: []string{"L", "F"}, ClusterID: cid}
			isrKey := ck.ISR("d", 0)
			raw := func(v any) []byte { b, _ := json.Marshal(v); return b }
			ok, rev0, err := store.Txn(ctx, nil, []kv.Op{kv.OpPut(keys.ShardState("d"), raw(states), 0),
				kv.OpPut(keys.Assign("d"), raw(assign), 0), kv.OpPut(isrKey, raw(first), 0)})
			require.NoError(t, err)
			require.True(t, ok)
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			events := store.Watch(wctx, isrKey, rev0+1)

			hctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); h.Run(hctx) }()
			defer func() { cancel(); <-done }()
			put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
			put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
				models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 2, UID: "u1"})
			put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", assign)
			put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d", states)

			// F leaves the assignment: the leader shrinks its set once it
			// leads with one.
			assign = models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L"}}}}
			raw2 := raw(assign)
			_, err = store.Put(ctx, keys.Assign("d"), raw2, 0)
			require.NoError(t, err)
			put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d", assign)

			var seen []models.ISR
			require.Eventually(t, func() bool {
				for {
					select {
					case resp := <-events:
						for _, ev := range resp.Events {
							var s models.ISR
							require.NoError(t, json.Unmarshal(ev.KV.Value, &s))
							seen = append(seen, s)
						}
						continue
					default:
					}
					break
				}
				return len(seen) > 0 && len(seen[len(seen)-1].Replicas) == 1
			}, 10*time.Second, 10*time.Millisecond)
			require.Len(t, seen, 1, "%+v", seen)
			require.Equal(t, models.ISR{Leader: "L", Term: 1, Replicas: []string{"L"}, ClusterID: cid}, seen[len(seen)-1])
		})
	}
}
