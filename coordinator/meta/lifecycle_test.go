package meta_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// TestDatabaseLifecycle: retention, the accepted window, the partition
// length and the policy name are validated on create and PATCH, stored in
// the config (ahead filled with its default), and take part in the
// identical-create check.
func TestDatabaseLifecycle(t *testing.T) {
	ctx := context.Background()
	a, store, keys := lifecycleAdmin(t)
	h := models.Duration(time.Hour)

	for _, bad := range []models.Database{
		{Name: "x", NumShards: 1, Retention: 2 * h, Partition: 3 * h},
		{Name: "x", NumShards: 1, Retention: models.Duration(1500 * time.Millisecond)},
		{Name: "x", NumShards: 1, Behead: -h},
		{Name: "x", NumShards: 1, Policy: "two words"},
	} {
		_, err := a.CreateDatabase(ctx, bad)
		require.ErrorIs(t, err, models.ErrBadInput, "%+v", bad)
	}
	kvs, _, err := store.List(ctx, "/cairn/")
	require.NoError(t, err)
	require.Empty(t, kvs, "a refused create writes nothing")

	req := models.Database{Name: "m", NumShards: 1, Retention: 2 * h, Partition: h}
	d, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	require.Equal(t, models.Duration(models.DefaultAhead), d.Ahead)
	kvp, err := store.Get(ctx, keys.DatabaseConfig("m"))
	require.NoError(t, err)
	require.Contains(t, string(kvp.Value), `"retention":"2h","ahead":"1d","partition":"1h"`)
	again, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err, "the same create again (ahead left to its default)")
	require.Equal(t, d.UID, again.UID)
	other := req
	other.Retention = 3 * h
	_, err = a.CreateDatabase(ctx, other)
	require.ErrorIs(t, err, models.ErrConflict)

	week, policy := 7*models.Duration(models.Day), "week"
	d, err = a.UpdateDatabase(ctx, "m", models.DatabasePatch{Retention: &week, Policy: &policy})
	require.NoError(t, err)
	require.Equal(t, week, d.Retention)
	require.Equal(t, "week", d.PolicyName())
	require.Equal(t, h, d.Partition, "what the patch does not give stays")
	long := 8 * models.Duration(models.Day)
	_, err = a.UpdateDatabase(ctx, "m", models.DatabasePatch{Partition: &long})
	require.ErrorIs(t, err, models.ErrBadInput, "a partition longer than the retention")
	_, err = a.UpdateDatabase(ctx, "m", models.DatabasePatch{})
	require.ErrorIs(t, err, models.ErrBadInput)
	require.Contains(t, err.Error(), "retention")
}

// TestDatabaseRollups: rollup levels are validated on create and PATCH (a
// clear 400 naming what is wrong, nothing written), stored, take part in the
// identical-create check, and a PATCH replaces or removes them.
func TestDatabaseRollups(t *testing.T) {
	ctx := context.Background()
	a, store, keys := lifecycleAdmin(t)
	h, m, d30 := models.Duration(time.Hour), models.Duration(time.Minute), 30*models.Duration(models.Day)
	lv := func(iv, ret models.Duration, fns ...string) models.Rollup {
		return models.Rollup{Interval: iv, Retention: ret, Functions: fns}
	}
	for _, c := range []struct {
		rollups []models.Rollup
		ret     models.Duration
		says    string
	}{
		{[]models.Rollup{lv(7*m, d30)}, 2 * h, "does not divide an hour"},
		{[]models.Rollup{lv(90*m, d30)}, 2 * h, "whole number of hours"},
		{[]models.Rollup{lv(0, d30)}, 2 * h, "at least 1s"},
		{[]models.Rollup{lv(5*m, h)}, 2 * h, "shorter than the raw retention"},
		{[]models.Rollup{lv(5*m, d30, "median")}, 2 * h, `unknown function "median"`},
		{[]models.Rollup{lv(10*m, d30), lv(5*m, d30)}, 2 * h, "must grow"},
		{[]models.Rollup{lv(20*m, d30), lv(30*m, d30)}, 2 * h, "divide the next"},
		{[]models.Rollup{lv(m, d30), lv(5*m, d30), lv(10*m, d30), lv(h, d30), lv(2*h, d30)}, 2 * h, "at most 4"},
		{[]models.Rollup{lv(5*m, d30)}, 0, "need a retention"},
	} {
		_, err := a.CreateDatabase(ctx, models.Database{Name: "x", NumShards: 1, Retention: c.ret, Rollups: c.rollups})
		require.ErrorIs(t, err, models.ErrBadInput, "%+v", c.rollups)
		require.ErrorContains(t, err, c.says)
	}
	kvs, _, err := store.List(ctx, "/cairn/")
	require.NoError(t, err)
	require.Empty(t, kvs, "a refused create writes nothing")

	req := models.Database{Name: "r", NumShards: 1, Retention: 2 * h,
		Rollups: []models.Rollup{lv(5*m, d30, "min", "max", "sum", "count", "last"), lv(h, 0)}}
	db, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	kvp, err := store.Get(ctx, keys.DatabaseConfig("r"))
	require.NoError(t, err)
	require.Contains(t, string(kvp.Value), `"rollups":[{"interval":"5m","retention":"30d","functions":["min","max","sum","count","last"]},{"interval":"1h"}]`)
	again, err := a.CreateDatabase(ctx, req)
	require.NoError(t, err)
	require.Equal(t, db.UID, again.UID)
	other := req
	other.Rollups = []models.Rollup{lv(5*m, d30)}
	_, err = a.CreateDatabase(ctx, other)
	require.ErrorIs(t, err, models.ErrConflict, "other rollups are another database")
	require.True(t, db.Rollups[0].Has("mean"))
	require.False(t, db.Rollups[0].Has("first"))
	require.True(t, db.Rollups[1].Has("first"), "no functions listed: all of them")

	// PATCH: a retention longer than a level's is refused, levels replaced, removed.
	long := 40 * models.Duration(models.Day)
	_, err = a.UpdateDatabase(ctx, "r", models.DatabasePatch{Retention: &long})
	require.ErrorIs(t, err, models.ErrBadInput)
	require.ErrorContains(t, err, "shorter than the raw retention")
	bad := []models.Rollup{lv(7*m, 0)}
	_, err = a.UpdateDatabase(ctx, "r", models.DatabasePatch{Rollups: &bad})
	require.ErrorIs(t, err, models.ErrBadInput)
	one := []models.Rollup{lv(10*m, 0)}
	db, err = a.UpdateDatabase(ctx, "r", models.DatabasePatch{Rollups: &one})
	require.NoError(t, err)
	require.Equal(t, one, db.Rollups)
	require.Equal(t, 2*h, db.Retention)
	none := []models.Rollup{}
	db, err = a.UpdateDatabase(ctx, "r", models.DatabasePatch{Rollups: &none})
	require.NoError(t, err)
	require.Empty(t, db.Rollups)
}

// lifecycleAdmin is an Admin over a memory store (closed with the test).
func lifecycleAdmin(t *testing.T) (*meta.Admin, kv.Store, models.Keys) {
	store := kv.NewMemoryStore()
	t.Cleanup(func() { store.Close() })
	keys := models.Keys{NS: "/cairn"}
	return &meta.Admin{Store: store, Keys: keys, State: fixedState(t)}, store, keys
}
