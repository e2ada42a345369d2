package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage"
	"go.uber.org/zap"
)

// preflightNodeID refuses to start, before the node serves anything, when
// its node id's broker or storage record is held live by another process (a
// copied data dir). A dead holder's lease is waited out. It is best effort:
// when etcd does not answer at once, or the node embeds its etcd member
// (which starts after the listener), the registration makes the same check
// before any shard is hosted.
func (a *App) preflightNodeID() error {
	if a.cfg.HasRole(config.RoleEtcd) || !(a.cfg.HasRole(config.RoleBroker) || a.cfg.HasRole(config.RoleStorage)) {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	kvp, err := a.store.Get(pctx, a.keys.StorageConfig(a.cfg.StorageCluster))
	cancel()
	if err != nil {
		a.lg.Debug("node id check skipped: etcd did not answer", zap.Error(err))
		return nil
	}
	wait := a.cfg.LeaseTTL * 3 / 2
	ctx, cancel := context.WithTimeout(context.Background(), wait+5*time.Second)
	defer cancel()
	addr := a.cfg.AdvertiseAddr
	check := func(store kv.Store, key, role string, owner func([]byte) (string, bool)) error {
		err := kv.AwaitFree(ctx, store, key, owner, wait)
		if errors.Is(err, kv.ErrHeld) {
			return fmt.Errorf("%s node id %q is in use by another live process: %w", role, a.nodeID, err)
		}
		if err != nil {
			a.lg.Debug("node id check skipped", zap.String("key", key), zap.Error(err))
		}
		return nil
	}
	if a.cfg.HasRole(config.RoleBroker) {
		if err := check(a.store, a.keys.Broker(a.nodeID), "broker", broker.BrokerOwner(addr)); err != nil {
			return err
		}
	}
	if a.cfg.HasRole(config.RoleStorage) && kvp != nil {
		var sc models.StorageCluster
		if json.Unmarshal(kvp.Value, &sc) != nil || sc.Name != a.cfg.StorageCluster {
			return nil // unreadable config: the registration checks later
		}
		store, ck, err := a.clusters.get(sc)
		if err != nil {
			return nil
		}
		return check(store, ck.Node(a.nodeID), "storage", storage.NodeOwner(addr))
	}
	return nil
}
