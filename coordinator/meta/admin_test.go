package meta_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// lostAnswerStore applies a txn and then reports a timeout, as etcd does
// when the proposal commits but the answer does not come back in time.
type lostAnswerStore struct {
	kv.Store
	lose bool
}

func (s *lostAnswerStore) Txn(ctx context.Context, cmps []kv.Cmp, ops []kv.Op) (bool, int64, error) {
	ok, rev, err := s.Store.Txn(ctx, cmps, ops)
	if err == nil && s.lose {
		return false, 0, fmt.Errorf("%w: %w: context deadline exceeded", kv.ErrOutcomeUnknown, kv.ErrUnavailable)
	}
	return ok, rev, err
}

// nospaceStore refuses every write as etcd does under its NOSPACE alarm.
type nospaceStore struct{ kv.Store }

func (nospaceStore) Txn(context.Context, []kv.Cmp, []kv.Op) (bool, int64, error) {
	return false, 0, fmt.Errorf("%w: etcdserver: mvcc: database space exceeded", kv.ErrNoSpace)
}

// TestCreateDatabaseIdempotent: a create whose answer was lost says "outcome
// unknown" (not "nothing changed"); repeating it returns the database it
// created (same uid), while another definition under the name is a conflict.
func TestCreateDatabaseIdempotent(t *testing.T) {
	ctx := context.Background()
	mem := kv.NewMemoryStore()
	store := &lostAnswerStore{Store: mem, lose: true}
	keys := models.Keys{NS: "/cairn"}
	// The local state never sees the database: the retry must find it in
	// the store, as a broker whose watch lags would.
	a := &meta.Admin{Store: store, Keys: keys, State: fixedState(t)}
	req := models.Database{Name: "metrics", NumShards: 4, ReplicaFactor: 2, Options: map[string]any{"retention": "7d"}}

	_, err := a.CreateDatabase(ctx, req)
	require.ErrorIs(t, err, kv.ErrOutcomeUnknown)
	require.ErrorIs(t, err, models.ErrOutcomeUnknown, "labelled for the API")
	require.NotErrorIs(t, err, models.ErrConflict)
	require.NotContains(t, err.Error(), "nothing changed")
	require.Contains(t, err.Error(), "safe to retry")
	kvp, err := mem.Get(ctx, keys.DatabaseConfig("metrics"))
	require.NoError(t, err)
	require.NotNil(t, kvp, "the timed-out create was applied")

	store.lose = false
	got, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err, "a retry of the same create succeeds")
	require.Equal(t, "metrics", got.Name)
	require.Equal(t, 4, got.NumShards)
	require.NotEmpty(t, got.UID)
	again, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	require.Equal(t, got.UID, again.UID, "every retry answers with the one stored database")

	for _, other := range []models.Database{
		{Name: "metrics", NumShards: 8, ReplicaFactor: 2, Options: map[string]any{"retention": "7d"}},
		{Name: "metrics", NumShards: 4, ReplicaFactor: 3, Options: map[string]any{"retention": "7d"}},
		{Name: "metrics", NumShards: 4, ReplicaFactor: 2},
	} {
		_, err := a.CreateDatabase(ctx, other)
		require.ErrorIs(t, err, models.ErrConflict, "%+v", other)
	}
	list, _, err := mem.List(ctx, keys.DatabaseConfigPrefix())
	require.NoError(t, err)
	require.Len(t, list, 1, "exactly one database stored")
}

// TestCreateStorageClusterIdempotent: the same for storage clusters.
func TestCreateStorageClusterIdempotent(t *testing.T) {
	ctx := context.Background()
	a := &meta.Admin{Store: kv.NewMemoryStore(), Keys: models.Keys{NS: "/cairn"}, State: fixedState(t)}
	c := models.StorageCluster{Name: "east", EtcdEndpoints: []string{"http://127.0.0.1:2379"}, Namespace: "/east"}
	_, err := a.CreateStorageCluster(ctx, c)
	require.NoError(t, err)
	_, err = a.CreateStorageCluster(ctx, c)
	require.NoError(t, err)
	c.Namespace = "/west"
	_, err = a.CreateStorageCluster(ctx, c)
	require.ErrorIs(t, err, models.ErrConflict)
}

// TestStorageClusterFailureDomain: failure_domain is kept, is part of the
// definition (a create with another one conflicts), and must be a label key.
func TestStorageClusterFailureDomain(t *testing.T) {
	ctx := context.Background()
	store := kv.NewMemoryStore()
	a := &meta.Admin{Store: store, Keys: models.Keys{NS: "/cairn"}, State: fixedState(t)}
	_, err := a.CreateStorageCluster(ctx, models.StorageCluster{Name: "zoned", FailureDomain: "no zone"})
	require.ErrorContains(t, err, `invalid failure_domain "no zone"`)
	kvp, err := store.Get(ctx, a.Keys.StorageConfig("zoned"))
	require.NoError(t, err)
	require.Nil(t, kvp, "a refused create writes nothing")
	c, err := a.CreateStorageCluster(ctx, models.StorageCluster{Name: "zoned", FailureDomain: "zone"})
	require.NoError(t, err)
	require.Equal(t, "zone", c.FailureDomain)
	kvp, err = store.Get(ctx, a.Keys.StorageConfig("zoned"))
	require.NoError(t, err)
	require.Contains(t, string(kvp.Value), `"failure_domain":"zone"`)
	_, err = a.CreateStorageCluster(ctx, models.StorageCluster{Name: "zoned", FailureDomain: "rack"})
	require.ErrorIs(t, err, models.ErrConflict)

	// PATCH changes it, and only it.
	rack, bad, none := "rack", "a rack", ""
	_, err = a.UpdateStorageCluster(ctx, "zoned", models.StorageClusterPatch{FailureDomain: &bad})
	require.ErrorContains(t, err, `invalid failure_domain "a rack"`)
	_, err = a.UpdateStorageCluster(ctx, "zoned", models.StorageClusterPatch{})
	require.ErrorContains(t, err, "nothing to change")
	_, err = a.UpdateStorageCluster(ctx, "nope", models.StorageClusterPatch{FailureDomain: &rack})
	require.ErrorIs(t, err, models.ErrNotFound)
	kvp, err = store.Get(ctx, a.Keys.StorageConfig("zoned"))
	require.NoError(t, err)
	require.Contains(t, string(kvp.Value), `"failure_domain":"zone"`, "refused patches change nothing")
	c, err = a.UpdateStorageCluster(ctx, "zoned", models.StorageClusterPatch{FailureDomain: &rack})
	require.NoError(t, err)
	require.Equal(t, models.StorageCluster{Name: "zoned", EtcdEndpoints: []string{}, FailureDomain: "rack"}, c)
	kvp, err = store.Get(ctx, a.Keys.StorageConfig("zoned"))
	require.NoError(t, err)
	require.Contains(t, string(kvp.Value), `"failure_domain":"rack"`)
	c, err = a.UpdateStorageCluster(ctx, "zoned", models.StorageClusterPatch{FailureDomain: &none})
	require.NoError(t, err)
	require.Empty(t, c.FailureDomain)
}

// TestDDLUnderNoSpace: etcd's NOSPACE alarm is reported as such, with what to
// do, never as a generic failure.
func TestDDLUnderNoSpace(t *testing.T) {
	a := &meta.Admin{Store: nospaceStore{kv.NewMemoryStore()}, Keys: models.Keys{NS: "/cairn"}, State: fixedState(t)}
	_, err := a.CreateDatabase(context.Background(), models.Database{Name: "m", NumShards: 1})
	require.ErrorIs(t, err, kv.ErrNoSpace)
	status, code := models.StatusOf(err)
	require.Equal(t, 503, status)
	require.Equal(t, "etcd_nospace", code)
	require.False(t, errors.Is(err, kv.ErrOutcomeUnknown))
	for _, hint := range []string{"nothing changed", "compact", "defrag", "--etcd-quota-backend-bytes", "alarm disarm"} {
		require.Contains(t, err.Error(), hint)
	}
}

// failingMaster fails every operation with err.
type failingMaster struct{ err error }

func (f failingMaster) TransferLeader(context.Context, string, int, models.LeaderTransfer) error {
	return f.err
}
func (f failingMaster) Rebalance(context.Context, bool) (models.PlanView, error) {
	return models.PlanView{}, f.err
}

// TestStoreErrorsLabelled: the etcd layer's failures leave meta labelled with
// the API's sentinels (the web layer knows only those), their own kept in the
// chain for errors.Is.
func TestStoreErrorsLabelled(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: x", kv.ErrUnavailable), "unavailable"},
		{fmt.Errorf("%w: x", kv.ErrDeposed), "unavailable"},
		{fmt.Errorf("%w: x", kv.ErrNoSpace), "etcd_nospace"},
		{fmt.Errorf("%w: %w", kv.ErrOutcomeUnknown, kv.ErrUnavailable), "outcome_unknown"},
		{fmt.Errorf("%w: x", models.ErrConflict), "conflict"},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			a := &meta.Admin{Store: kv.NewMemoryStore(), Keys: models.Keys{NS: "/c"}, State: fixedState(t), Master: failingMaster{c.err}}
			_, err := a.Rebalance(ctx, true)
			require.ErrorIs(t, err, c.err)
			_, code := models.StatusOf(err)
			require.Equal(t, c.code, code)
		})
	}
	down := kv.NewMemoryStore()
	down.SetDown(true)
	a := &meta.Admin{Store: down, Keys: models.Keys{NS: "/c"}, State: fixedState(t)}
	err := a.DeleteDatabase(ctx, "x")
	require.ErrorIs(t, err, kv.ErrUnavailable)
	_, code := models.StatusOf(err)
	require.Equal(t, "unavailable", code)
}

// TestCreateAfterDropSeenLate: a database dropped a moment ago is still in
// the broker's local state; creating it again with the same definition must
// create a new incarnation in etcd (a new uid), not answer with the dropped
// one. Only while etcd cannot answer does the local copy answer a repeat.
func TestCreateAfterDropSeenLate(t *testing.T) {
	ctx := context.Background()
	keys := models.Keys{NS: "/cairn"}
	req := models.Database{Name: "re", NumShards: 2, ReplicaFactor: 1}
	// The dropped incarnation, as a create stored it.
	old, err := (&meta.Admin{Store: kv.NewMemoryStore(), Keys: keys, State: fixedState(t)}).CreateDatabase(ctx, req)
	require.NoError(t, err)
	m := statemachine.New(statemachine.Config{})
	m.Push(statemachine.Event{Source: "nodes/default", Kind: statemachine.KindStorageNodes, Cluster: "default",
		Type: kv.WatchPut, Name: "n1", Value: models.StorageNode{NodeID: "n1"}})
	m.Push(statemachine.Event{Source: statemachine.SourceStorageConfig, Kind: statemachine.KindStorageConfig,
		Type: kv.WatchPut, Name: "default", Value: models.StorageCluster{Name: "default"}})
	m.Push(statemachine.Event{Source: statemachine.SourceDatabaseConfig, Kind: statemachine.KindDatabaseConfig,
		Type: kv.WatchPut, Name: "re", Value: old})
	m.Start(ctx)
	t.Cleanup(m.Stop)
	require.Eventually(t, func() bool { return m.Snapshot().Databases.Has("re") }, 5e9, 1e6)

	// etcd no longer has it (the drop committed; the watch is behind).
	mem := kv.NewMemoryStore()
	a := &meta.Admin{Store: mem, Keys: keys, State: m.Snapshot}

	mem.SetDown(true)
	got, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err, "etcd away: a repeat of what the state shows answers from it")
	require.Equal(t, old.UID, got.UID)

	mem.SetDown(false)
	got, err = a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	require.NotEqual(t, old.UID, got.UID, "answered with the dropped incarnation")
	kvp, err := mem.Get(ctx, keys.DatabaseConfig("re"))
	require.NoError(t, err)
	require.NotNil(t, kvp, "the new incarnation was never written")
	again, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	require.Equal(t, got.UID, again.UID, "a repeat answers with the stored incarnation")
	_, err = a.CreateDatabase(ctx, models.Database{Name: "re", NumShards: 3, ReplicaFactor: 1})
	require.ErrorIs(t, err, models.ErrConflict)
}

// TestCreateAnswersOnceTheLocalStateShowsIt: with Changed set, a create
// answers only once this node's state (fed by the real watcher of the
// store) shows the new database, and a drop once it shows it gone, so the
// caller's next request here finds it; with the watch stopped, a drop still
// answers (after a bound).
func TestCreateAnswersOnceTheLocalStateShowsIt(t *testing.T) {
	ctx := context.Background()
	keys := models.Keys{NS: "/cairn"}
	mem := kv.NewMemoryStore()
	m := statemachine.New(statemachine.Config{})
	m.Push(statemachine.Event{Source: "nodes/default", Kind: statemachine.KindStorageNodes, Cluster: "default",
		Type: kv.WatchPut, Name: "n1", Value: models.StorageNode{NodeID: "n1"}})
	m.Push(statemachine.Event{Source: statemachine.SourceStorageConfig, Kind: statemachine.KindStorageConfig,
		Type: kv.WatchPut, Name: "default", Value: models.StorageCluster{Name: "default"}})
	m.Start(ctx)
	t.Cleanup(m.Stop)
	m.AddSource(statemachine.Source{Name: statemachine.SourceDatabaseConfig, Store: mem,
		Prefix: keys.DatabaseConfigPrefix(), Kind: statemachine.KindDatabaseConfig})
	require.Eventually(t, func() bool { return m.Snapshot().Nodes.At("default").Len() == 1 }, 5e9, 1e6)
	a := &meta.Admin{Store: mem, Keys: keys, State: m.Snapshot, Changed: m.Changed}

	for i := range 20 {
		name := fmt.Sprintf("x%d", i)
		got, err := a.CreateDatabase(ctx, models.Database{Name: name, NumShards: 1, ReplicaFactor: 1})
		require.NoError(t, err)
		require.Equal(t, got.UID, m.Snapshot().Databases.At(name).UID, "answered before the local state showed %s", name)
		require.NoError(t, a.DeleteDatabase(ctx, name))
		require.False(t, m.Snapshot().Databases.Has(name), "answered before the local state showed %s dropped", name)
	}

	_, err := a.CreateDatabase(ctx, models.Database{Name: "y", NumShards: 1, ReplicaFactor: 1})
	require.NoError(t, err)
	m.RemoveSource(statemachine.SourceDatabaseConfig) // the watch stops: the state never shows the drop
	require.NoError(t, a.DeleteDatabase(ctx, "y"))
	kvp, err := mem.Get(ctx, keys.DatabaseConfig("y"))
	require.NoError(t, err)
	require.Nil(t, kvp)
}
