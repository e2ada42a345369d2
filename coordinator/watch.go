package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/backoff"
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

// watchCluster calls replaced when the store's cluster id changes or its
// revision falls below what the watch already saw: etcd was replaced or
// restored underneath a reconnecting client.
func watchCluster(ctx context.Context, cfg WatcherConfig, clusterID uint64, seenRev *atomic.Int64, replaced func()) {
	t := time.NewTicker(ClusterCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := seenRev.Load() // read first: revisions only grow in one cluster
		id, rev, err := cfg.Store.Header(ctx)
		if err != nil {
			continue
		}
		if id != clusterID || rev < before {
			replaced()
			return
		}
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
	for _, kv := range kvs {
		next[kv.Key] = kv.ModRev
		if old, ok := known[kv.Key]; fresh || !ok || old != kv.ModRev {
			emit(WatchEvent{Kind: WatchPut, Key: kv.Key, Value: kv.Value, Rev: kv.ModRev, CreateRev: kv.CreateRev})
		}
	}
	for k := range known {
		if _, ok := next[k]; !ok {
			emit(WatchEvent{Kind: WatchDelete, Key: k})
		}
	}
	return next
}
