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
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A shard leader never writes an in-sync set for a shard etcd no longer has.
// The leader's cached state still says it leads "late" (the moment between an
// etcd restore or a drop and the watch catching up); an ISR change is then
// triggered (a replica leaves the assignment). Against a real etcd: with the
// keys intact the set is updated; with etcd wiped (an older backup restored)
// no key is recreated; with the database's shard state gone (dropped) the
// old set is not touched; a leader whose first write finds no shard state
// in etcd creates nothing; a set removed alone (a backup taken before it was
// first written) is written again, as the shard is still there. The fallback for a cluster with its own etcd (no
// state fence) still refuses to recreate a removed set.
func TestISRWriteFencedOnVanishedShard(t *testing.T) {
	const (
		ns     = "/t"
		isrKey = "/t/storage/default/isr/late/1"
	)
	keys := models.Keys{NS: ns}
	cases := []struct {
		name       string
		stateFence bool
		damage     func(ctx context.Context, s kv.Store) error
		want       []string // the set in etcd afterwards; nil: absent
		refused    error
		// absent: etcd never had the database (the restore happened before
		// the leader's first write, which keeps retrying until it succeeds).
		absent bool
		// holder: the leader registered its node record (its create
		// revision is known), and damage may re-create it.
		holder bool
	}{
		{name: "node record re-created by another process (a copy after our lease lapsed): not written", stateFence: true, holder: true,
			want: []string{"L", "F"}, refused: storage.ErrNotHolder,
			damage: func(ctx context.Context, s kv.Store) error {
				key := models.ClusterKeys{SNS: ns + "/storage/default"}.Node("L")
				if _, err := s.Delete(ctx, key); err != nil {
					return err
				}
				_, err := s.Put(ctx, key, []byte(`{"node_id":"L","node_address":"127.0.0.1:2"}`), 0)
				return err
			}},
		{name: "node record still ours: written", stateFence: true, holder: true, want: []string{"L"}},
		{name: "first write of a term, the database not in etcd", stateFence: true, absent: true},
		{name: "intact: the change is written", stateFence: true, want: []string{"L"}},
		{name: "etcd wiped and an older backup restored", stateFence: true, refused: storage.ErrShardGone,
			damage: func(ctx context.Context, s kv.Store) error {
				_, err := s.DeletePrefix(ctx, ns+"/")
				return err
			}},
		{name: "database dropped: shard state deleted", stateFence: true, want: []string{"L", "F"}, refused: storage.ErrShardGone,
			damage: func(ctx context.Context, s kv.Store) error {
				_, _, err := s.Txn(ctx, nil, []kv.Op{kv.OpDelete(keys.ShardState("late")), kv.OpDelete(keys.Assign("late"))})
				return err
			}},
		{name: "only the set removed, the shard still in etcd: written again", stateFence: true, want: []string{"L"},
			damage: func(ctx context.Context, s kv.Store) error {
				_, _, err := s.Txn(ctx, nil, []kv.Op{kv.OpDelete(isrKey)})
				return err
			}},
		{name: "own etcd (no state fence), wiped", refused: storage.ErrShardGone,
			damage: func(ctx context.Context, s kv.Store) error {
				_, err := s.DeletePrefix(ctx, ns+"/")
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := etcdtest.Start(t).Store(t)
			sm := statemachine.New(statemachine.Config{})
			sm.Start(ctx)
			defer sm.Stop()
			core, logs := observer.New(zap.WarnLevel)
			eng, err := engine.NewBoltEngine(t.TempDir())
			require.NoError(t, err)
			cfg := storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store,
				Keys: models.ClusterKeys{SNS: ns + "/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
				Logger: zap.New(core), LagBound: time.Hour, DropDelay: time.Hour}
			if tc.stateFence {
				cfg.StateStore, cfg.StateKeys = store, keys
			}
			h := storage.NewHost(cfg)
			if tc.holder {
				key := cfg.Keys.Node("L")
				_, err := store.Put(ctx, key, []byte(`{"node_id":"L","node_address":"127.0.0.1:1"}`), 0)
				require.NoError(t, err)
				rec, err := store.Get(ctx, key)
				require.NoError(t, err)
				h.SetRecordRev(rec.CreateRev)
			}
			hctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); h.Run(hctx) }()
			defer func() { cancel(); <-done; _ = eng.Close() }()

			states := models.ShardStates{DB: "late", Shards: []models.ShardState{
				{ID: 0, Leader: "F", Term: 1, Status: models.StatusOnline}, {ID: 1, Leader: "L", Term: 3, Status: models.StatusOnline}}}
			assign := models.Assignment{DB: "late", Cluster: "default", Shards: []models.ShardAssignment{
				{ID: 0, Replicas: []string{"F"}}, {ID: 1, Replicas: []string{"L", "F"}}}}
			if !tc.absent {
				raw, _ := json.Marshal(states)
				_, err = store.Put(ctx, keys.ShardState("late"), raw, 0)
				require.NoError(t, err)
				raw, _ = json.Marshal(assign)
				_, err = store.Put(ctx, keys.Assign("late"), raw, 0)
				require.NoError(t, err)
			}
			put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
			for _, n := range []string{"L", "F"} {
				live(t, store, ns+"/storage/default", n, "127.0.0.1:1")
			}
			put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "late",
				models.Database{Name: "late", StorageCluster: "default", NumShards: 2, ReplicaFactor: 2, UID: "u1"})
			put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "late", assign)
			put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "late", states)

			set := func() []string {
				kvp, err := store.Get(ctx, isrKey)
				require.NoError(t, err)
				if kvp == nil {
					return nil
				}
				var s models.ISR
				require.NoError(t, json.Unmarshal(kvp.Value, &s))
				return s.Replicas
			}
			if tc.absent {
				require.Eventually(t, func() bool {
					return logs.FilterMessage("shard not in etcd; not publishing its in-sync set").Len() > 0
				}, 10*time.Second, 10*time.Millisecond)
				require.Nil(t, set(), "no set created for a database etcd does not have")
				return
			}
			// The leader publishes its first set: both live replicas.
			require.Eventually(t, func() bool { return len(set()) == 2 }, 10*time.Second, 10*time.Millisecond)
			if tc.damage != nil {
				require.NoError(t, tc.damage(ctx, store))
			}
			// F leaves the assignment of shard 1 (the cached state still has
			// the database): the leader drops F from its set at once. A new
			// record, as a watch event decodes one: snapshots are immutable,
			// and editing the pushed record's Shards in place would change
			// the record the state manager already holds (the host sees no
			// new record and a racing read).
			assign.Shards = []models.ShardAssignment{assign.Shards[0], {ID: 1, Replicas: []string{"L"}}}
			put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "late", assign)

			if tc.refused == nil {
				require.Eventually(t, func() bool { return len(set()) == 1 }, 10*time.Second, 10*time.Millisecond)
				require.Equal(t, tc.want, set())
				return
			}
			require.Eventually(t, func() bool {
				for _, e := range logs.FilterMessage("in-sync set not updated").All() {
					if err, ok := e.ContextMap()["error"].(string); ok && err != "" {
						return true
					}
				}
				return false
			}, 10*time.Second, 10*time.Millisecond, "the leader tried to write the change")
			var refusal string
			for _, e := range logs.FilterMessage("in-sync set not updated").All() {
				refusal, _ = e.ContextMap()["error"].(string)
			}
			require.Contains(t, refusal, tc.refused.Error())
			require.Equal(t, tc.want, set(), "the set in etcd is as the damage left it")
		})
	}
}
