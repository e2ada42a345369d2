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
	store := kv.NewMemoryStore()
	defer store.Close()
	keys := models.Keys{NS: "/cairn"}
	a := &meta.Admin{Store: store, Keys: keys, State: fixedState(t)}
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
