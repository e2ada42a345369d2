package meta

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
)

// UpdateStorageCluster changes a storage cluster's failure domain; the
// master places new shards by it at once and moves existing replicas apart
// at its next rebalance. The write is guarded by the config's mod revision.
func (a *Admin) UpdateStorageCluster(ctx context.Context, name string, p models.StorageClusterPatch) (models.StorageCluster, error) {
	if p.FailureDomain == nil {
		return models.StorageCluster{}, bad("nothing to change: give failure_domain")
	}
	if fd := *p.FailureDomain; fd != "" && !models.ValidName(fd) {
		return models.StorageCluster{}, bad("invalid failure_domain %q: want a node label key, [A-Za-z0-9_-]{1,64}", fd)
	}
	kvp, err := a.Store.Get(ctx, a.Keys.StorageConfig(name))
	if err != nil {
		return models.StorageCluster{}, unavailable(err)
	}
	if kvp == nil {
		return models.StorageCluster{}, fmt.Errorf("%w: storage cluster %q", models.ErrNotFound, name)
	}
	var c models.StorageCluster
	if err := json.Unmarshal(kvp.Value, &c); err != nil {
		return c, fmt.Errorf("storage cluster %q config unreadable: %w", name, err)
	}
	c.FailureDomain = *p.FailureDomain
	data, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	ok, _, err := a.Store.Txn(ctx, []kv.Cmp{kv.ModRevIs(kvp.Key, kvp.ModRev)}, []kv.Op{kv.OpPut(kvp.Key, data, 0)})
	if err != nil {
		return c, unavailable(err)
	}
	if !ok {
		return c, fmt.Errorf("%w: storage cluster %q changed concurrently; retry", models.ErrConflict, name)
	}
	return c, nil
}
