package app

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/logrepeat"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// clusterStores hands out the store of each storage cluster: Cairn's own for
// clusters without endpoints, a dedicated client for those in another etcd.
type clusterStores struct {
	mu     sync.Mutex
	main   kv.Store
	mk     func([]string) kv.EtcdConfig
	keys   models.Keys
	stores map[string]*clusterStore
	// ownChanged is closed, and replaced, when a dedicated client comes or
	// goes: what wakes probeClusters while it has nothing to probe.
	ownChanged chan struct{}
}

type clusterStore struct {
	cfg   models.StorageCluster
	store kv.Store
	own   bool // a dedicated client to close
}

func newClusterStores(main kv.Store, mk func([]string) kv.EtcdConfig, keys models.Keys) *clusterStores {
	return &clusterStores{main: main, mk: mk, keys: keys, stores: map[string]*clusterStore{}, ownChanged: make(chan struct{})}
}

// get returns the store and keys of a cluster, connecting when needed.
func (c *clusterStores) get(cfg models.StorageCluster) (kv.Store, models.ClusterKeys, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ck := models.ClusterKeys{SNS: c.keys.ClusterNamespace(cfg)}
	if cs, ok := c.stores[cfg.Name]; ok && slices.Equal(cs.cfg.EtcdEndpoints, cfg.EtcdEndpoints) && cs.cfg.Namespace == cfg.Namespace {
		return cs.store, ck, nil
	}
	c.dropLocked(cfg.Name)
	cs := &clusterStore{cfg: cfg, store: c.main}
	if len(cfg.EtcdEndpoints) > 0 {
		// Its probe reads inside the cluster's namespace: an etcd user
		// may be limited to it.
		ec := c.mk(cfg.EtcdEndpoints)
		ec.Namespace = ck.SNS
		s, err := kv.NewEtcdStore(ec)
		if err != nil {
			return nil, ck, err
		}
		cs.store, cs.own = s, true
		c.bumpOwnLocked()
	}
	c.stores[cfg.Name] = cs
	return cs.store, ck, nil
}

func (c *clusterStores) dropLocked(name string) {
	if cs, ok := c.stores[name]; ok {
		if cs.own {
			_ = cs.store.Close()
			c.bumpOwnLocked()
		}
		delete(c.stores, name)
	}
}

func (c *clusterStores) bumpOwnLocked() {
	close(c.ownChanged)
	c.ownChanged = make(chan struct{})
}

func (c *clusterStores) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(name)
}

func (c *clusterStores) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.stores {
		c.dropLocked(name)
	}
}

// watchClusters keeps one pair of sources (live nodes, in-sync sets) per
// configured storage cluster, in that cluster's etcd: added when a cluster is
// configured, removed (with its keys) when it is deleted.
func (a *App) watchClusters(ctx context.Context) {
	watched := map[string]models.StorageCluster{}
	failing := logrepeat.New(a.lg, 30*time.Second, nil)
	for {
		changed := a.sm.Changed()
		st := a.sm.Snapshot()
		for name, cfg := range st.StorageClusters {
			if old, ok := watched[name]; ok && slices.Equal(old.EtcdEndpoints, cfg.EtcdEndpoints) && old.Namespace == cfg.Namespace {
				continue
			}
			if _, ok := watched[name]; ok {
				a.removeClusterSources(name)
			}
			store, ck, err := a.clusters.get(cfg)
			if err != nil {
				failing.Warn(name, "cannot connect to storage cluster", zap.String("cluster", name), zap.Error(err))
				continue
			}
			for _, src := range a.watched(statemachine.ClusterSources(store, name, ck)) {
				a.sm.AddSource(src)
			}
			watched[name] = cfg
		}
		for name := range watched {
			if _, ok := st.StorageClusters[name]; !ok && !st.FromBackup {
				a.removeClusterSources(name)
				a.clusters.drop(name)
				delete(watched, name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (a *App) removeClusterSources(name string) {
	a.sm.RemoveSource(statemachine.ClusterNodesSource(name))
	a.sm.RemoveSource(statemachine.ClusterISRSource(name))
}
