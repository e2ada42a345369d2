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
	s, reg := meteredStore(t, 50*time.Millisecond)
	const watchers = 20
	startSyncedWatchers(t, s, watchers, "/p")

	base, t0 := histCount(t, reg, "header"), time.Now()
	require.Eventually(t, func() bool { return histCount(t, reg, "header")-base >= 25 }, 20*time.Second, 5*time.Millisecond,
		"the watchers keep checking their cluster")
	probes, window := histCount(t, reg, "header")-base, time.Since(t0)
	bound := int(window/kv.ClusterCheckInterval) + 3 // latency up to two intervals
	require.LessOrEqual(t, probes, bound, "%d probes in %v by %d watchers: not shared", probes, window, watchers)
}

// Against a real etcd: while a lease of the store is renewed, its renewals'
// answers (each third of the lease's TTL) carry the cluster id and revision,
// and the watchers' cluster checks and readiness take them instead of
// probing: over three check intervals the store sends at most one probe.
// Without them it sends one per interval.
func TestEtcdStoreChecksHearLeaseRenewals(t *testing.T) {
	// clientv3 renews a 2 s lease each ~1 s (two thirds of a second, on its
	// half-second ticks); nodes run 3 s leases and 2 s checks.
	s, reg := meteredStore(t, 1600*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease, err := s.Grant(ctx, 2*time.Second)
	require.NoError(t, err)
	_, err = s.KeepAlive(ctx, lease)
	require.NoError(t, err)
	synced := startSyncedWatchers(t, s, 5, "/h")
	// clientv3 sends the first renewal on its next half-second tick, and the
	// watchers may have probed as they started: a probe's answer is taken
	// while it is young, after that the renewals' answers are.
	var h kv.ClusterHeader
	require.Eventually(t, func() bool {
		h, err = s.SharedHeader(ctx, kv.ClusterCheckInterval)
		return err == nil && !h.Exact
	}, 10*time.Second, 20*time.Millisecond, "a renewal's answer, not a probe")
	require.NotZero(t, h.ID)

	base := histCount(t, reg, "header")
	renewed := h.At
	// Three check intervals, each write moving the revision the watchers see.
	for i := range 3 {
		_, err := s.Put(ctx, fmt.Sprintf("/h%d/k", i), []byte("v"), 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			h, err := s.SharedHeader(ctx, kv.ClusterCheckInterval)
			return err == nil && h.At.After(renewed.Add(kv.ClusterCheckInterval))
		}, 10*time.Second, 20*time.Millisecond)
		h, _ := s.SharedHeader(ctx, kv.ClusterCheckInterval)
		renewed = h.At
	}
	require.LessOrEqual(t, histCount(t, reg, "header")-base, 1, "the checks probed though renewals were answered")
	require.EqualValues(t, 5, synced.Load(), "a watcher listed again: a renewal's header was taken for a replaced etcd")

	// The lease gone, the checks probe again.
	require.NoError(t, s.Revoke(ctx, lease))
	require.Eventually(t, func() bool { return histCount(t, reg, "header")-base >= 2 }, 20*time.Second, 20*time.Millisecond)
}

// meteredStore sets the cluster check interval for the test and connects a
// store with request metrics to a new member.
func meteredStore(t *testing.T, checkEvery time.Duration) (*kv.EtcdStore, *prometheus.Registry) {
	setCheckInterval(t, checkEvery)
	reg := prometheus.NewRegistry()
	member := etcdtest.Start(t)
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{member.Endpoint}, Metrics: kv.NewEtcdMetrics(reg)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// startSyncedWatchers runs n watchers of s (prefixes prefix0/, prefix1/...)
// until the test ends, waits until each has listed, and returns the count of
// their lists.
func startSyncedWatchers(t *testing.T, s kv.Store, n int, prefix string) *atomic.Int64 {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var synced atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: fmt.Sprintf("%s%d/", prefix, i)}, func(ev kv.WatchEvent) {
				if ev.Kind == kv.WatchSynced {
					synced.Add(1)
				}
			})
		}()
	}
	require.Eventually(t, func() bool { return synced.Load() == int64(n) }, 10*time.Second, 5*time.Millisecond)
	return &synced
}
