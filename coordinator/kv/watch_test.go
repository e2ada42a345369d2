package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

// cutStore lets a test sever one client's reads and watches while writes go
// through another path, as a network partition between a node and etcd would.
type cutStore struct {
	kv.Store
	mu      sync.Mutex
	cut     bool
	cancels []context.CancelFunc
}

func (c *cutStore) setCut(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = v
	if v {
		for _, cancel := range c.cancels {
			cancel()
		}
		c.cancels = nil
	}
}

func (c *cutStore) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

func (c *cutStore) List(ctx context.Context, p string) ([]kv.KeyValue, int64, error) {
	if c.isCut() {
		return nil, 0, kv.ErrUnavailable
	}
	return c.Store.List(ctx, p)
}

func (c *cutStore) ClusterID(ctx context.Context) (uint64, error) {
	if c.isCut() {
		return 0, kv.ErrUnavailable
	}
	return c.Store.ClusterID(ctx)
}

func (c *cutStore) Watch(ctx context.Context, p string, rev int64) <-chan kv.RawWatchResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(chan kv.RawWatchResponse, 1)
	if c.cut {
		out <- kv.RawWatchResponse{Err: kv.ErrUnavailable}
		close(out)
		return out
	}
	wctx, cancel := context.WithCancel(ctx)
	c.cancels = append(c.cancels, cancel)
	in := c.Store.Watch(wctx, p, rev)
	go func() {
		defer close(out)
		for r := range in {
			select {
			case out <- r:
			case <-ctx.Done():
			}
		}
		if ctx.Err() == nil {
			out <- kv.RawWatchResponse{Err: kv.ErrUnavailable}
		}
	}()
	return out
}

// mirror is a consumer that applies watcher events and checks for duplicates.
type mirror struct {
	mu     sync.Mutex
	kvp    map[string]string
	seen   map[string]bool // key@rev of puts
	dups   []string
	synced int
}

func (m *mirror) apply(ev kv.WatchEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case kv.WatchPut:
		id := fmt.Sprintf("%s@%d", ev.Key, ev.Rev)
		if m.seen[id] {
			m.dups = append(m.dups, id)
		}
		m.seen[id] = true
		m.kvp[ev.Key] = string(ev.Value)
	case kv.WatchDelete:
		delete(m.kvp, ev.Key)
	case kv.WatchSynced:
		m.synced++
	}
}

func (m *mirror) equals(want map[string]string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.kvp) != len(want) {
		return false
	}
	for k, v := range want {
		if m.kvp[k] != v {
			return false
		}
	}
	return true
}

func testWatcherCutOff(t *testing.T, s kv.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := "/wt/"
	for _, k := range []string{"keep", "change", "vanish"} {
		_, err := s.Put(ctx, p+k, []byte("v0"), 0)
		require.NoError(t, err)
	}
	cs := &cutStore{Store: s}
	m := &mirror{kvp: map[string]string{}, seen: map[string]bool{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		kv.RunWatcher(ctx, kv.WatcherConfig{Store: cs, Prefix: p, MaxBackoff: 100 * time.Millisecond}, m.apply)
	}()
	current := func() map[string]string {
		kvs, _, err := s.List(ctx, p)
		require.NoError(t, err)
		out := map[string]string{}
		for _, kvp := range kvs {
			out[kvp.Key] = string(kvp.Value)
		}
		return out
	}
	require.Eventually(t, func() bool { return m.equals(current()) }, 10*time.Second, 10*time.Millisecond)

	cs.setCut(true)
	_, err := s.Put(ctx, p+"change", []byte("v1"), 0)
	require.NoError(t, err)
	_, err = s.Put(ctx, p+"new", []byte("v1"), 0)
	require.NoError(t, err)
	_, err = s.Delete(ctx, p+"vanish")
	require.NoError(t, err)
	rev, err := s.Put(ctx, p+"new", []byte("v2"), 0)
	require.NoError(t, err)
	require.NoError(t, s.Compact(ctx, rev))
	cs.setCut(false)

	require.Eventually(t, func() bool { return m.equals(current()) }, 10*time.Second, 10*time.Millisecond)
	// And it keeps watching after the re-list.
	_, err = s.Put(ctx, p+"after", []byte("v3"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.equals(current()) }, 10*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
	require.Empty(t, m.dups, "no event delivered twice")
	require.GreaterOrEqual(t, m.synced, 2, "the cut-off forced a re-list")
}

func TestWatcherCutOffMemory(t *testing.T) {
	s := kv.NewMemoryStore()
	defer s.Close()
	testWatcherCutOff(t, s)
}

func TestWatcherCutOffEtcd(t *testing.T) {
	testWatcherCutOff(t, etcdtest.Start(t).Store(t))
}

// A watcher seeded with keys from a local backup deletes those that no longer
// exist when it first lists.
func TestWatcherSeededDeletesVanished(t *testing.T) {
	s := kv.NewMemoryStore()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Put(ctx, "/p/live", []byte("x"), 0)
	require.NoError(t, err)
	m := &mirror{kvp: map[string]string{"/p/gone": "old", "/p/live": "x"}, seen: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: "/p/",
			Known: map[string]int64{"/p/gone": 1, "/p/live": 999}}, m.apply)
	}()
	require.Eventually(t, func() bool { return m.equals(map[string]string{"/p/live": "x"}) }, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
}

// A client that reconnects to a replaced or restored etcd keeps its watch
// open; the watcher must notice (new cluster id or revisions going back) and
// re-list, so keys that vanished are deleted and restored ones re-emitted.
func TestWatcherNoticesReplacedStore(t *testing.T) {
	old := kv.ClusterCheckInterval
	kv.ClusterCheckInterval = 50 * time.Millisecond
	defer func() { kv.ClusterCheckInterval = old }()
	s := kv.NewMemoryStore()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 20 {
		_, err := s.Put(ctx, fmt.Sprintf("/r/k%d", i), []byte("old"), 0)
		require.NoError(t, err)
	}
	m := &mirror{kvp: map[string]string{}, seen: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: "/r/"}, m.apply)
	}()
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.kvp) == 20 }, 5*time.Second, 5*time.Millisecond)
	s.Replace()
	_, err := s.Put(ctx, "/r/k1", []byte("restored"), 0)
	require.NoError(t, err)
	_, err = s.Put(ctx, "/r/fresh", []byte("new"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return m.equals(map[string]string{"/r/k1": "restored", "/r/fresh": "new"})
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
}

// setCheckInterval sets how often watchers check their cluster, for the test.
func setCheckInterval(t *testing.T, d time.Duration) {
	old := kv.ClusterCheckInterval
	kv.ClusterCheckInterval = d
	t.Cleanup(func() { kv.ClusterCheckInterval = old })
}

// countingStore counts cluster probes (Header) and the checks that asked for
// one (SharedHeader).
type countingStore struct {
	*kv.MemoryStore
	probe          kv.HeaderProbe
	probes, checks atomic.Int64
}

func (c *countingStore) Header(ctx context.Context) (uint64, int64, error) {
	c.probes.Add(1)
	return c.MemoryStore.Header(ctx)
}

func (c *countingStore) SharedHeader(ctx context.Context, maxAge time.Duration) (kv.ClusterHeader, error) {
	c.checks.Add(1)
	return c.probe.Get(ctx, maxAge, c.Header)
}

// Watchers of one store share its cluster probe: twenty watched prefixes
// cost about one probe per check interval, not twenty; and a replaced store
// is still noticed through the shared probe.
func TestWatchersShareClusterProbe(t *testing.T) {
	setCheckInterval(t, 20*time.Millisecond)
	s := &countingStore{MemoryStore: kv.NewMemoryStore()}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	mirrors := make([]*mirror, 20)
	for i := range mirrors {
		m := &mirror{kvp: map[string]string{}, seen: map[string]bool{}}
		mirrors[i] = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: fmt.Sprintf("/w%d/", i)}, m.apply)
		}()
	}
	require.Eventually(t, func() bool { return s.checks.Load() >= 400 }, 20*time.Second, 5*time.Millisecond)
	checks, probes := s.checks.Load(), s.probes.Load()
	require.Less(t, probes*4, checks, "probes %d for %d checks: not shared", probes, checks)

	s.Replace()
	_, err := s.Put(ctx, "/w3/k", []byte("after"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mirrors[3].equals(map[string]string{"/w3/k": "after"}) }, 5*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
}

// A header heard with another answer (a lease renewal) may have been read by
// etcd before revisions the watch has seen since: one that looks older than
// the watch only makes the check probe, and the watch goes on without a new
// list while the probe finds the same cluster. A replaced store is still
// noticed while such headers keep coming.
func TestHeardHeaderOnlyRaisesTheQuestion(t *testing.T) {
	setCheckInterval(t, 20*time.Millisecond)
	s := &countingStore{MemoryStore: kv.NewMemoryStore()}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 10 {
		_, err := s.Put(ctx, fmt.Sprintf("/q/k%d", i), []byte("v"), 0)
		require.NoError(t, err)
	}
	// Renewal answers read before any of those writes, heard all the time.
	id, _, err := s.MemoryStore.Header(ctx)
	require.NoError(t, err)
	stop := make(chan struct{})
	var hearing sync.WaitGroup
	hearing.Add(1)
	go func() {
		defer hearing.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				cid, _, _ := s.MemoryStore.Header(ctx)
				s.probe.Heard(cid, 1)
			}
		}
	}()
	defer func() { close(stop); hearing.Wait() }()
	m := &mirror{kvp: map[string]string{}, seen: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kv.RunWatcher(ctx, kv.WatcherConfig{Store: s, Prefix: "/q/"}, m.apply)
	}()
	require.Eventually(t, func() bool { return s.probes.Load() >= 20 }, 10*time.Second, 5*time.Millisecond,
		"stale heard headers make the checks probe")
	m.mu.Lock()
	synced := m.synced
	m.mu.Unlock()
	require.Equal(t, 1, synced, "listed again though the probes found the same cluster")
	require.NotZero(t, id)

	s.Replace()
	_, err = s.Put(ctx, "/q/after", []byte("new"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.equals(map[string]string{"/q/after": "new"}) }, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
}

// Callers of a HeaderProbe share the probe under way but wait for it no
// longer than their own ctx (readiness must not hang behind a watcher's
// probe of a dead etcd), share a failure etcd gave (not one their own ctx
// caused), and take an answer heard after that failure over it.
func TestHeaderProbeSharesFailuresAndWaits(t *testing.T) {
	var p kv.HeaderProbe
	var calls atomic.Int64
	release := make(chan error)
	fetch := func(ctx context.Context) (uint64, int64, error) {
		calls.Add(1)
		select {
		case err := <-release:
			return 7, 9, err
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background(), time.Minute, fetch)
		first <- err
	}()
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := p.Get(short, time.Minute, fetch)
	cancel()
	require.ErrorIs(t, err, kv.ErrUnavailable, "a caller gives up waiting at its own deadline")
	require.EqualValues(t, 1, calls.Load(), "it waited for the probe under way, sent none")

	down := errors.New("connection refused")
	release <- down
	require.ErrorIs(t, <-first, down)
	_, err = p.Get(context.Background(), time.Minute, fetch)
	require.ErrorIs(t, err, down, "a failure etcd gave is shared within maxAge")
	require.EqualValues(t, 1, calls.Load())

	p.Heard(7, 10)
	h, err := p.Get(context.Background(), time.Minute, fetch)
	require.NoError(t, err, "an answer heard after the failure says etcd answers")
	require.Equal(t, kv.ClusterHeader{ID: 7, Rev: 10, At: h.At}, h)
	require.False(t, h.Exact)

	// maxAge 0 always probes, and its answer is exact.
	go func() { release <- nil }()
	h, err = p.Get(context.Background(), 0, fetch)
	require.NoError(t, err)
	require.True(t, h.Exact)
	require.EqualValues(t, 9, h.Rev)
	require.EqualValues(t, 2, calls.Load())

	// A probe ended by its caller's own ctx is not shared as etcd's failure.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Get(cctx, 0, fetch)
	require.Error(t, err)
	h, err = p.Get(context.Background(), time.Minute, fetch)
	require.NoError(t, err)
	require.True(t, h.Exact)
}
