package kv

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"go.uber.org/zap"
)

// WatchEventKind says what a Watcher saw.
type WatchEventKind int

// Watcher event kinds.
const (
	WatchPut    WatchEventKind = iota // key created or changed
	WatchDelete                       // key gone (also emitted after a re-list for keys that vanished)
	WatchSynced                       // a (re)list finished: the consumer now holds exactly the store's keys
)

// WatchEvent is one change delivered by a Watcher.
type WatchEvent struct {
	Kind  WatchEventKind
	Key   string
	Value []byte
	Rev   int64 // mod revision of the change, or the list revision for WatchSynced
	// CreateRev is the key's create revision (puts only): the master key's term.
	CreateRev int64
	// ClusterID is the etcd cluster the list came from (WatchSynced only).
	ClusterID uint64
}

// WatcherConfig configures a list-then-watch loop over one prefix.
type WatcherConfig struct {
	Store  Store
	Prefix string
	// Known seeds the keys the consumer already holds (for example from a local
	// backup), so the first list emits deletes for keys that vanished meanwhile.
	Known      map[string]int64 // key -> mod revision
	Logger     *zap.Logger
	MinBackoff time.Duration // default 50ms
	MaxBackoff time.Duration // default 2s
}

// RunWatcher lists prefix, emits the difference from what the consumer holds,
// then watches from the listed revision + 1. A compaction, a replaced etcd
// cluster (new cluster id or revisions going backwards) or a lost stream leads
// to a re-list whose diff is emitted, so the consumer never misses a change or
// keeps a key that vanished. emit may block (backpressure). RunWatcher returns
// when ctx ends.
func RunWatcher(ctx context.Context, cfg WatcherConfig, emit func(WatchEvent)) {
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.With(zap.String("prefix", cfg.Prefix))
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 50 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	known := make(map[string]int64, len(cfg.Known))
	for k, v := range cfg.Known {
		known[k] = v
	}
	bo := backoff.New(cfg.MinBackoff, cfg.MaxBackoff)
	wait := func() bool { return bo.Wait(ctx) }
	var clusterID uint64
	var lastRev int64
	needList := true
	for ctx.Err() == nil {
		id, err := cfg.Store.ClusterID(ctx)
		if err != nil {
			if !wait() {
				return
			}
			continue
		}
		fresh := clusterID != 0 && id != clusterID
		if fresh {
			lg.Warn("etcd cluster changed, re-listing", zap.Uint64("old_cluster_id", clusterID), zap.Uint64("new_cluster_id", id))
			needList = true
		}
		if needList {
			kvs, rev, err := cfg.Store.List(ctx, cfg.Prefix)
			if err != nil {
				lg.Debug("list failed", zap.Error(err))
				if !wait() {
					return
				}
				continue
			}
			if rev < lastRev {
				// Revisions went backwards: a restored or replaced cluster.
				fresh = true
			}
			clusterID = id
			known = diffAndEmit(known, kvs, fresh, emit)
			emit(WatchEvent{Kind: WatchSynced, Rev: rev, ClusterID: id})
			lastRev = rev
			needList = false
		}
		wctx, cancel := context.WithCancel(ctx)
		ch := cfg.Store.Watch(wctx, cfg.Prefix, lastRev+1)
		var replaced atomic.Bool
		var seenRev atomic.Int64
		seenRev.Store(lastRev)
		checkDone := make(chan struct{})
		go func() {
			defer close(checkDone)
			watchCluster(wctx, cfg, clusterID, &seenRev, func() { replaced.Store(true); cancel() })
		}()
		err = consume(ch, known, &lastRev, &seenRev, emit)
		cancel()
		for range ch { // let the watch goroutine finish
		}
		<-checkDone
		if ctx.Err() != nil {
			return
		}
		if replaced.Load() {
			// The client reconnected to a different etcd (restored or
			// replaced) and would keep watching it from our old revision:
			// re-list it as a fresh cluster.
			lg.Warn("etcd cluster replaced or restored, re-listing")
			clusterID, lastRev, needList = 0, 0, true
			known = forceFresh(known)
			continue
		}
		if errors.Is(err, ErrCompacted) {
			lg.Info("watch compacted, re-listing", zap.Error(err))
			needList = true
			continue // a re-list needs no back-off: etcd answered
		}
		lg.Debug("watch interrupted", zap.Error(err))
		if !wait() {
			return
		}
		if err == nil {
			bo.Reset()
		}
	}
}

// ClusterCheckInterval is how often a watcher verifies it still talks to the
// same etcd cluster.
var ClusterCheckInterval = 2 * time.Second

// HeaderProbe shares one cluster-id/revision probe among the watchers of a
// store: a store with many watched prefixes makes one probe per interval,
// not one per watcher. The zero value is ready to use.
type HeaderProbe struct {
	mu  sync.Mutex
	id  uint64
	rev int64
	at  time.Time // when the last successful probe was sent
}

// Get returns the last probe's answer and when it was sent if it is younger
// than maxAge, else probes now with fetch. Concurrent callers wait for one
// probe and share it.
func (p *HeaderProbe) Get(ctx context.Context, maxAge time.Duration,
	fetch func(context.Context) (uint64, int64, error)) (uint64, int64, time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < maxAge {
		return p.id, p.rev, p.at, nil
	}
	at := time.Now()
	id, rev, err := fetch(ctx)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	p.id, p.rev, p.at = id, rev, at
	return id, rev, at, nil
}

// sharedHeaderStore is a store whose watchers share cluster probes.
type sharedHeaderStore interface {
	SharedHeader(ctx context.Context, maxAge time.Duration) (uint64, int64, time.Time, error)
}

// probeHeader asks the store for its cluster id and revision, sharing a
// recent probe when the store can; at is when the answering probe was sent.
func probeHeader(ctx context.Context, store Store, maxAge time.Duration) (uint64, int64, time.Time, error) {
	if s, ok := store.(sharedHeaderStore); ok {
		return s.SharedHeader(ctx, maxAge)
	}
	at := time.Now()
	id, rev, err := store.Header(ctx)
	return id, rev, at, err
}

// watchCluster calls replaced when the store's cluster id changes or its
// revision falls below what the watch had seen before the probe was sent:
// etcd was replaced or restored underneath a reconnecting client. The probe
// may be shared with other watchers of the store, so it is compared with the
// revision this watch had seen at its previous check, which came before any
// probe young enough to be shared.
func watchCluster(ctx context.Context, cfg WatcherConfig, clusterID uint64, seenRev *atomic.Int64, replaced func()) {
	t := time.NewTicker(ClusterCheckInterval)
	defer t.Stop()
	prevRev, prevAt := seenRev.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev0, at0 := seenRev.Load(), time.Now()
		id, rev, at, err := probeHeader(ctx, cfg.Store, ClusterCheckInterval)
		if err != nil {
			continue
		}
		// Revisions only grow in one cluster, so a probe sent after we had
		// seen prevRev cannot answer less.
		if id != clusterID || (at.After(prevAt) && rev < prevRev) {
			replaced()
			return
		}
		prevRev, prevAt = rev0, at0
	}
}

// forceFresh marks every known key as changed so the next list re-emits all.
func forceFresh(known map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(known))
	for k := range known {
		out[k] = -1
	}
	return out
}

func consume(ch <-chan RawWatchResponse, known map[string]int64, lastRev *int64, seenRev *atomic.Int64, emit func(WatchEvent)) error {
	for resp := range ch {
		if resp.Err != nil {
			return resp.Err
		}
		for _, ev := range resp.Events {
			if ev.Type == EventDelete {
				if _, ok := known[ev.KV.Key]; ok {
					delete(known, ev.KV.Key)
					emit(WatchEvent{Kind: WatchDelete, Key: ev.KV.Key, Rev: ev.KV.ModRev})
				}
			} else {
				known[ev.KV.Key] = ev.KV.ModRev
				emit(WatchEvent{Kind: WatchPut, Key: ev.KV.Key, Value: ev.KV.Value, Rev: ev.KV.ModRev, CreateRev: ev.KV.CreateRev})
			}
			*lastRev = max(*lastRev, ev.KV.ModRev)
		}
		*lastRev = max(*lastRev, resp.Rev)
		seenRev.Store(*lastRev)
	}
	return nil
}

// diffAndEmit emits what changed between the keys the consumer holds and a
// fresh list; with fresh set (a new cluster) every listed key is re-emitted
// because mod revisions of two clusters cannot be compared.
func diffAndEmit(known map[string]int64, kvs []KeyValue, fresh bool, emit func(WatchEvent)) map[string]int64 {
	next := make(map[string]int64, len(kvs))
	for _, kvp := range kvs {
		next[kvp.Key] = kvp.ModRev
		if old, ok := known[kvp.Key]; fresh || !ok || old != kvp.ModRev {
			emit(WatchEvent{Kind: WatchPut, Key: kvp.Key, Value: kvp.Value, Rev: kvp.ModRev, CreateRev: kvp.CreateRev})
		}
	}
	for k := range known {
		if _, ok := next[k]; !ok {
			emit(WatchEvent{Kind: WatchDelete, Key: k})
		}
	}
	return next
}
