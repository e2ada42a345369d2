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
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// A new leader takes the first in-sync set the master created with the
// placement from its watched state, without reading it, only when nothing
// since can have made that set stale: the states still vouch for it (the
// placement's txn, the same etcd), the assignment is still the placement's,
// its log is empty (an earlier run of its leadership may have shrunk the
// set and acknowledged writes without a member) and every replica is live.
// Otherwise it reads the set and leads from what etcd holds. Each stale
// case puts on record a set without a replica the placement named; taking
// the placement's set would count that replica in sync, and fails the test.
func TestLeaderTakesPlacedFirstSetOnlyWhenCurrent(t *testing.T) {
	const ns = "/t"
	keys := models.Keys{NS: ns}
	ck := models.ClusterKeys{SNS: ns + "/storage/default"}
	for _, tc := range []struct {
		name     string
		noMarker bool // the states do not vouch for the sets
		logged   bool // L's log holds an entry at term 1, its set on record shrunk to itself
		moved    bool // after placement F's replica moved to G (the assignment rewritten)
		fDead    bool // F has no live record
		want     []string
		placed   bool // taken from the watched state, unread
	}{
		{name: "placed, empty log: taken unread", want: []string{"L", "F"}, placed: true},
		{name: "states without the mark: read", noMarker: true, want: []string{"L"}},
		{name: "entries in the log: read", logged: true, want: []string{"L"}},
		{name: "assignment rewritten: read", moved: true, want: []string{"L"}},
		{name: "a replica not live: read", fDead: true, want: []string{"L"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := etcdtest.Start(t).Store(t)
			cid, err := store.ClusterID(ctx)
			require.NoError(t, err)
			sm := statemachine.New(statemachine.Config{})
			sm.Start(ctx)
			defer sm.Stop()

			eng, err := engine.NewBoltEngine(t.TempDir())
			require.NoError(t, err)
			t.Cleanup(func() { _ = eng.Close() })
			if tc.logged {
				sh, err := eng.Open("d", 0)
				require.NoError(t, err)
				wait, err := sh.Append(engine.Entry{TxnID: sh.NextTxnID(), Term: 1,
					Points: []lineproto.Point{{Metric: "cpu", Field: "value", Value: 1, TS: 1}}})
				require.NoError(t, err)
				require.NoError(t, wait())
			}
			others := []string{"G"}
			if !tc.fDead {
				others = append(others, "F")
			}
			h := leaderHostOn(t, eng, store, sm, ck, keys, others...)

			// The placement's txn, as the master writes it (placeNew).
			raw := func(v any) []byte { b, _ := json.Marshal(v); return b }
			db := models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 2, UID: "u1"}
			states := models.ShardStates{DB: "d", UID: "u1", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}}
			if !tc.noMarker {
				states.FirstSets = cid
			}
			assign := models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L", "F"}}}}
			first := models.ISR{Leader: "L", Term: 1, Replicas: []string{"L", "F"}, ClusterID: cid}
			if tc.noMarker {
				first.Replicas = []string{"L"} // a set the states do not vouch for
			}
			ok, rev0, err := store.Txn(ctx, nil, []kv.Op{
				kv.OpPut(keys.StorageConfig("default"), raw(models.StorageCluster{Name: "default"}), 0),
				kv.OpPut(keys.DatabaseConfig("d"), raw(db), 0), kv.OpPut(keys.ShardState("d"), raw(states), 0),
				kv.OpPut(keys.Assign("d"), raw(assign), 0), kv.OpPut(ck.ISR("d", 0), raw(first), 0)})
			require.NoError(t, err)
			require.True(t, ok)
			last := rev0
			if tc.logged {
				// An earlier run of this leadership dropped F and wrote
				// the entry without it.
				last, err = store.Put(ctx, ck.ISR("d", 0), raw(models.ISR{Leader: "L", Term: 1, Replicas: []string{"L"}, ClusterID: cid}), 0)
				require.NoError(t, err)
			}
			if tc.moved {
				assign.Shards[0].Replicas = []string{"L", "G"}
				last, err = store.Put(ctx, keys.Assign("d"), raw(assign), 0)
				require.NoError(t, err)
			}

			// What a storage node watches (app.watched): no in-sync sets.
			srcs := append(statemachine.MainSources(store, keys), statemachine.ClusterSources(store, "default", ck)...)
			for _, src := range srcs {
				if src.Kind != statemachine.KindISR {
					sm.AddSource(src)
				}
			}
			require.Eventually(t, func() bool {
				st := sm.Snapshot()
				return st.Revisions[statemachine.SourceAssign] >= last && st.Synced[statemachine.ClusterNodesSource("default")]
			}, 10*time.Second, 10*time.Millisecond)

			hctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); h.Run(hctx) }()
			defer func() { cancel(); <-done }()

			require.Eventually(t, func() bool { return h.LeaderSet("d", 0) != nil }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, tc.want, h.LeaderSet("d", 0))
			if tc.placed {
				require.EqualValues(t, 1, h.PlacedSets())
				kvp, err := store.Get(ctx, ck.ISR("d", 0))
				require.NoError(t, err)
				require.Equal(t, rev0, kvp.ModRev, "the placed set was written again")
			} else {
				require.Zero(t, h.PlacedSets(), "a set taken from the watch that the placement no longer vouches for")
			}
		})
	}
}
