package app

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/internal/problems"
	"go.uber.org/zap"
)

// clusterProbeEvery is how often the etcd of each storage cluster with
// endpoints of its own is asked for its header.
const clusterProbeEvery = time.Second

// ownEtcd is one storage cluster on an etcd of its own, as probed.
type ownEtcd struct {
	endpoints []string
	header    func(context.Context) error
}

// owned lists the clusters whose store is a dedicated client, and the
// channel closed when that list changes.
func (c *clusterStores) owned() (map[string]ownEtcd, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]ownEtcd{}
	for name, cs := range c.stores {
		if !cs.own {
			continue
		}
		store := cs.store
		out[name] = ownEtcd{endpoints: slices.Clone(cs.cfg.EtcdEndpoints), header: func(ctx context.Context) error {
			_, _, err := store.Header(ctx)
			return err
		}}
	}
	return out, c.ownChanged
}

// clusterEtcdDown lists the storage clusters whose own etcd did not answer
// the last probe, for /api/v1/problems.
func (a *App) clusterEtcdDown() []problems.ClusterEtcd {
	a.clusterDownMu.Lock()
	defer a.clusterDownMu.Unlock()
	out := make([]problems.ClusterEtcd, 0, len(a.clusterDown))
	for _, name := range slices.Sorted(maps.Keys(a.clusterDown)) {
		out = append(out, a.clusterDown[name])
	}
	return out
}

// probeClusters asks, every second, the etcd of each storage cluster that
// has one of its own whether it answers. One that does not is shown as a
// critical problem (cluster_etcd_down) and by the cairn_cluster_etcd_up
// gauge: the cluster's writes go on from the last known state, but its
// failover cannot happen until it answers. Each change is logged once.
// With no such cluster it sleeps until one is configured: most nodes have
// none, and a ticker woke each of them every second for nothing.
func (a *App) probeClusters(ctx context.Context) {
	t := time.NewTimer(clusterProbeEvery)
	defer t.Stop()
	for {
		started := time.Now()
		owned, changed := a.clusters.owned()
		errs := make(map[string]error, len(owned))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, o := range owned {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
				err := o.header(pctx)
				cancel()
				mu.Lock()
				errs[name] = err
				mu.Unlock()
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		a.noteClusterProbes(owned, errs, time.Now())
		var tick <-chan time.Time
		if len(owned) > 0 {
			t.Reset(time.Until(started.Add(clusterProbeEvery)))
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-changed:
		}
	}
}

// noteClusterProbes records one round of probes: the down set, the gauge,
// one log line per change; clusters no longer probed are forgotten.
func (a *App) noteClusterProbes(owned map[string]ownEtcd, errs map[string]error, now time.Time) {
	a.clusterDownMu.Lock()
	defer a.clusterDownMu.Unlock()
	for name := range a.clusterProbed {
		if _, ok := owned[name]; !ok {
			delete(a.clusterDown, name)
			delete(a.clusterProbed, name)
			a.clusterUp.DeleteLabelValues(name)
		}
	}
	for name, o := range owned {
		err := errs[name]
		prev, wasDown := a.clusterDown[name]
		switch {
		case err != nil && !wasDown:
			a.clusterDown[name] = problems.ClusterEtcd{Cluster: name, Endpoints: o.endpoints, Since: now, Err: err.Error()}
			a.lg.Error("storage cluster's etcd does not answer: its failover is impossible until it does",
				zap.String("cluster", name), zap.Strings("etcd_endpoints", o.endpoints), zap.Error(err))
		case err != nil:
			prev.Err = err.Error()
			a.clusterDown[name] = prev
		case wasDown:
			delete(a.clusterDown, name)
			a.lg.Info("storage cluster's etcd answers again", zap.String("cluster", name),
				zap.Duration("down_for", now.Sub(prev.Since)))
		}
		a.clusterProbed[name] = true
		up := 0.0
		if err == nil {
			up = 1
		}
		a.clusterUp.WithLabelValues(name).Set(up)
	}
}
