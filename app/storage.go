package app

import (
	"context"
	"time"

	"github.com/cairn-db/cairn/storage"
	"go.uber.org/zap"
)

// runStorage waits for this node's storage cluster to be configured, then
// keeps the node registered in it.
func (a *App) runStorage(ctx context.Context) {
	changed := a.sm.Subscribe()
	warned := false
	for {
		st := a.sm.Snapshot()
		if cfg, ok := st.StorageClusters[a.cfg.StorageCluster]; ok {
			store, ck, err := a.clusters.get(cfg)
			if err == nil {
				storage.RunNode(ctx, storage.NodeConfig{Store: store, Keys: ck, NodeID: a.nodeID, Address: a.cfg.AdvertiseAddr,
					Cluster: cfg.Name, TTL: a.cfg.LeaseTTL, Logger: a.lg.Named("storage")})
				return
			}
			a.lg.Warn("cannot reach storage cluster", zap.String("cluster", cfg.Name), zap.Error(err))
		} else if !warned && len(st.Synced) > 0 {
			a.lg.Warn("storage cluster not configured yet; waiting (create it with POST /api/v1/storage-clusters)",
				zap.String("cluster", a.cfg.StorageCluster))
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}
