package kv

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemoryStore is an in-process Store with etcd's semantics: one revision
// counter, create and mod revisions, leases that expire, watches from a past
// revision and compaction. Tests use it.
type MemoryStore struct {
	mu        sync.Mutex
	rev       int64
	compacted int64
	kvs       map[string]KeyValue
	history   []RawEvent // every change after compacted, in revision order
	leases    map[LeaseID]*memLease
	nextLease LeaseID
	watchers  map[*memWatcher]struct{}
	clusterID uint64
	closed    bool
	down      bool
}

type memLease struct {
	ttl   time.Duration
	timer *time.Timer
	lost  chan struct{}
}

type memWatcher struct {
	prefix string
	ch     chan RawWatchResponse
	ctx    context.Context
	buf    []RawWatchResponse
	signal chan struct{}
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{
		kvs:       map[string]KeyValue{},
		leases:    map[LeaseID]*memLease{},
		watchers:  map[*memWatcher]struct{}{},
		clusterID: rand.Uint64(),
		rev:       1,
	}
}

// SetDown simulates an unreachable store: every call fails with ErrUnavailable
// and open watches end.
func (m *MemoryStore) SetDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
	if down {
		for w := range m.watchers {
			m.sendLocked(w, RawWatchResponse{Err: fmt.Errorf("%w: store down", ErrUnavailable)})
			delete(m.watchers, w)
		}
	}
}

func (m *MemoryStore) check() error {
	if m.closed {
		return ErrClosed
	}
	if m.down {
		return fmt.Errorf("%w: store down", ErrUnavailable)
	}
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, key string) (*KeyValue, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, err
	}
	kvp, ok := m.kvs[key]
	if !ok {
		return nil, nil
	}
	kvp.Value = bytes.Clone(kvp.Value)
	return &kvp, nil
}

// GetMany reads keys (nil for an absent one) and the cluster id at once,
// as EtcdStore.GetMany.
func (m *MemoryStore) GetMany(_ context.Context, keys []string) ([]*KeyValue, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, 0, err
	}
	out := make([]*KeyValue, len(keys))
	for i, k := range keys {
		if kvp, ok := m.kvs[k]; ok {
			kvp.Value = bytes.Clone(kvp.Value)
			out[i] = &kvp
		}
	}
	return out, m.clusterID, nil
}

// List implements Store.
func (m *MemoryStore) List(ctx context.Context, prefix string) ([]KeyValue, int64, error) {
	return m.ListAt(ctx, prefix, "", 0, 0)
}

// ListAt implements Store. Past revisions are rebuilt from history.
func (m *MemoryStore) ListAt(_ context.Context, prefix, after string, rev int64, limit int) ([]KeyValue, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, 0, err
	}
	view := m.kvs
	if rev > 0 && rev < m.rev {
		if rev < m.compacted {
			return nil, 0, fmt.Errorf("%w: revision %d < %d", ErrCompacted, rev, m.compacted)
		}
		view = m.viewAtLocked(rev)
	}
	var out []KeyValue
	for k, kvp := range view {
		if strings.HasPrefix(k, prefix) && k > after {
			kvp.Value = bytes.Clone(kvp.Value)
			out = append(out, kvp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	r := m.rev
	if rev > 0 {
		r = rev
	}
	return out, r, nil
}

// viewAtLocked undoes history newer than rev.
func (m *MemoryStore) viewAtLocked(rev int64) map[string]KeyValue {
	view := make(map[string]KeyValue, len(m.kvs))
	for k, v := range m.kvs {
		view[k] = v
	}
	for i := len(m.history) - 1; i >= 0 && m.history[i].KV.ModRev > rev; i-- {
		ev := m.history[i]
		delete(view, ev.KV.Key)
		// find the previous version of this key, if any, at or before rev
		for j := i - 1; j >= 0; j-- {
			p := m.history[j]
			if p.KV.Key != ev.KV.Key {
				continue
			}
			if p.KV.ModRev <= rev && p.Type == EventPut {
				view[p.KV.Key] = p.KV
			}
			break
		}
	}
	return view
}

func (m *MemoryStore) putLocked(key string, value []byte, lease LeaseID) {
	m.rev++
	kvp := KeyValue{Key: key, Value: bytes.Clone(value), ModRev: m.rev, CreateRev: m.rev, Lease: lease}
	if old, ok := m.kvs[key]; ok {
		kvp.CreateRev = old.CreateRev
	}
	m.kvs[key] = kvp
	m.emitLocked(RawEvent{Type: EventPut, KV: kvp})
}

func (m *MemoryStore) deleteLocked(key string) bool {
	if _, ok := m.kvs[key]; !ok {
		return false
	}
	m.rev++
	delete(m.kvs, key)
	m.emitLocked(RawEvent{Type: EventDelete, KV: KeyValue{Key: key, ModRev: m.rev}})
	return true
}

func (m *MemoryStore) emitLocked(ev RawEvent) {
	m.history = append(m.history, ev)
	for w := range m.watchers {
		if strings.HasPrefix(ev.KV.Key, w.prefix) {
			m.sendLocked(w, RawWatchResponse{Events: []RawEvent{ev}, Rev: ev.KV.ModRev})
		}
	}
}

// sendLocked queues a response for the watcher's pump goroutine; it never blocks.
func (m *MemoryStore) sendLocked(w *memWatcher, r RawWatchResponse) {
	w.buf = append(w.buf, r)
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, key string, value []byte, lease LeaseID) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return 0, err
	}
	if lease != 0 {
		if _, ok := m.leases[lease]; !ok {
			return 0, ErrLeaseNotFound
		}
	}
	m.putLocked(key, value, lease)
	return m.rev, nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return false, err
	}
	return m.deleteLocked(key), nil
}

// DeletePrefix implements Store.
func (m *MemoryStore) DeletePrefix(_ context.Context, prefix string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return 0, err
	}
	var keys []string
	for k := range m.kvs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.deleteLocked(k)
	}
	return int64(len(keys)), nil
}

// Txn implements Store.
func (m *MemoryStore) Txn(_ context.Context, cmps []Cmp, ops []Op) (bool, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return false, 0, err
	}
	for _, c := range cmps {
		kvp, ok := m.kvs[c.Key]
		switch c.Kind {
		case CmpCreateRev:
			if (ok && kvp.CreateRev != c.Rev) || (!ok && c.Rev != 0) {
				return false, m.rev, nil
			}
		case CmpModRev:
			if (ok && kvp.ModRev != c.Rev) || (!ok && c.Rev != 0) {
				return false, m.rev, nil
			}
		case CmpValue:
			if !ok || !bytes.Equal(kvp.Value, c.Value) {
				return false, m.rev, nil
			}
		}
	}
	for _, o := range ops {
		if !o.Delete && o.Lease != 0 {
			if _, ok := m.leases[o.Lease]; !ok {
				return false, 0, ErrLeaseNotFound
			}
		}
	}
	// etcd gives every op of a txn the same revision; emulate that.
	base := m.rev + 1
	for _, o := range ops {
		m.rev = base - 1
		if o.Delete {
			m.deleteLocked(o.Key)
		} else {
			m.putLocked(o.Key, o.Value, o.Lease)
		}
	}
	if len(ops) > 0 {
		m.rev = base
	}
	return true, m.rev, nil
}

// Grant implements Store.
func (m *MemoryStore) Grant(_ context.Context, ttl time.Duration) (LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return 0, err
	}
	m.nextLease++
	id := m.nextLease
	l := &memLease{ttl: ttl, lost: make(chan struct{})}
	l.timer = time.AfterFunc(ttl, func() { m.expire(id) })
	m.leases[id] = l
	return id, nil
}

func (m *MemoryStore) expire(id LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.revokeLocked(id)
}

func (m *MemoryStore) revokeLocked(id LeaseID) bool {
	l, ok := m.leases[id]
	if !ok {
		return false
	}
	l.timer.Stop()
	delete(m.leases, id)
	close(l.lost)
	var keys []string
	for k, kvp := range m.kvs {
		if kvp.Lease == id {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.deleteLocked(k)
	}
	return true
}

// KeepAlive implements Store.
func (m *MemoryStore) KeepAlive(ctx context.Context, id LeaseID) (<-chan struct{}, error) {
	m.mu.Lock()
	l, ok := m.leases[id]
	m.mu.Unlock()
	if !ok {
		return nil, ErrLeaseNotFound
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.lost:
				return
			case <-t.C:
				m.mu.Lock()
				if !m.down {
					l.timer.Reset(l.ttl)
				}
				m.mu.Unlock()
			}
		}
	}()
	return done, nil
}

// Revoke implements Store.
func (m *MemoryStore) Revoke(_ context.Context, id LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return err
	}
	if !m.revokeLocked(id) {
		return ErrLeaseNotFound
	}
	return nil
}

// Watch implements Store.
func (m *MemoryStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan RawWatchResponse {
	w := &memWatcher{prefix: prefix, ch: make(chan RawWatchResponse), ctx: ctx, signal: make(chan struct{}, 1)}
	m.mu.Lock()
	if err := m.check(); err != nil {
		w.buf = append(w.buf, RawWatchResponse{Err: err})
	} else if fromRev > 0 && fromRev < m.compacted {
		w.buf = append(w.buf, RawWatchResponse{Err: fmt.Errorf("%w: revision %d < %d", ErrCompacted, fromRev, m.compacted)})
	} else {
		for _, ev := range m.history {
			if ev.KV.ModRev >= fromRev && strings.HasPrefix(ev.KV.Key, prefix) {
				w.buf = append(w.buf, RawWatchResponse{Events: []RawEvent{ev}, Rev: ev.KV.ModRev})
			}
		}
		m.watchers[w] = struct{}{}
	}
	w.signal <- struct{}{}
	m.mu.Unlock()
	go m.pump(w)
	return w.ch
}

func (m *MemoryStore) pump(w *memWatcher) {
	defer close(w.ch)
	defer func() {
		m.mu.Lock()
		delete(m.watchers, w)
		m.mu.Unlock()
	}()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.signal:
		}
		m.mu.Lock()
		batch := w.buf
		w.buf = nil
		m.mu.Unlock()
		for _, r := range batch {
			select {
			case w.ch <- r:
			case <-w.ctx.Done():
				return
			}
			if r.Err != nil {
				return
			}
		}
	}
}

// Compact implements Store.
func (m *MemoryStore) Compact(_ context.Context, rev int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return err
	}
	if rev <= m.compacted {
		return fmt.Errorf("%w: revision %d already compacted", ErrCompacted, rev)
	}
	m.compacted = rev
	// Like etcd, keep the newest version of each live key at or before rev so
	// reads at any revision >= rev still see it.
	latest := map[string]int{}
	for i, ev := range m.history {
		if ev.KV.ModRev > rev {
			break
		}
		latest[ev.KV.Key] = i
	}
	kept := make([]RawEvent, 0, len(m.history))
	for i, ev := range m.history {
		if ev.KV.ModRev > rev || (latest[ev.KV.Key] == i && ev.Type == EventPut) {
			kept = append(kept, ev)
		}
	}
	m.history = kept
	return nil
}

// ClusterID implements Store.
func (m *MemoryStore) ClusterID(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return 0, err
	}
	return m.clusterID, nil
}

// Header implements Store.
func (m *MemoryStore) Header(context.Context) (uint64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return 0, 0, err
	}
	return m.clusterID, m.rev, nil
}

// Replace simulates swapping the backing etcd for a fresh cluster: a new
// cluster id, no keys, revisions starting over. Open watches keep running,
// as an etcd client's would after reconnecting.
func (m *MemoryStore) Replace() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clusterID = rand.Uint64()
	m.kvs = map[string]KeyValue{}
	m.history = nil
	m.rev = 1
	m.compacted = 0
	for id := range m.leases {
		m.leases[id].timer.Stop()
		close(m.leases[id].lost)
		delete(m.leases, id)
	}
}

// Close implements Store.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for id := range m.leases {
		m.leases[id].timer.Stop()
	}
	for w := range m.watchers {
		m.sendLocked(w, RawWatchResponse{Err: ErrClosed})
	}
	return nil
}
