package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Against a real etcd: twenty watchers of one EtcdStore make one cluster
// probe per check interval between them, not one each. Probes are spaced at
// least an interval apart (a shared probe younger than that is reused), so
// the probes answered over a window are at most (window + their latency) /
// interval + 1, where twenty unshared watchers would make up to twenty times
// that.
func TestEtcdStoreWatchersShareOneProbe(t *testing.T) {
	old := kv.ClusterCheckInterval
	kv.ClusterCheckInterval = 50 * time.Millisecond
	defer func() { kv.ClusterCheckInterval = old }()
	reg := prometheus.NewRegistry()
	member := etcdtest.Start(t)
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{member.Endpoint}, Metrics: kv.NewEtcdMetrics(reg)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const watchers = 20
	var synced atomic.Int64
	for i := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: fmt.Sprintf("/p%d/", i)}, func(ev kv.WatchEvent) {
				if ev.Kind == kv.WatchSynced {
					synced.Add(1)
				}
			})
		}()
	}
	require.Eventually(t, func() bool { return synced.Load() == watchers }, 10*time.Second, 5*time.Millisecond)

	base, t0 := histCount(t, reg, "header"), time.Now()
	require.Eventually(t, func() bool { return histCount(t, reg, "header")-base >= 25 }, 20*time.Second, 5*time.Millisecond,
		"the watchers keep checking their cluster")
	probes, window := histCount(t, reg, "header")-base, time.Since(t0)
	bound := int(window/kv.ClusterCheckInterval) + 3 // latency up to two intervals
	require.LessOrEqual(t, probes, bound, "%d probes in %v by %d watchers: not shared", probes, window, watchers)
}
