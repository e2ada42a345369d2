package kv

import (
	"context"
	"errors"
	"fmt"
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
	// More: an event of the same revision (one txn's other keys) or of the
	// same list follows this one. A consumer that counts a revision as seen
	// once one of its events is applied shows the others' keys old: a
	// master that published 50 databases' states in one txn, and waited for
	// its revision, read some of them stale and lost its next publication
	// to its own guard.
	More bool
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
// not one per watcher. It also keeps the header of etcd's last answer to
// another request (Heard: a lease renewal, which every node with a lease
// gets each third of its TTL), which answers a check instead of a probe
// while it is young: sixty idle nodes probing every two seconds were most
// of the requests an idle etcd served. The zero value is ready to use.
type HeaderProbe struct {
	mu       sync.Mutex
	last     ClusterHeader // the last probe's answer (Exact)
	heard    ClusterHeader // the last answer heard to another request
	failedAt time.Time     // when the last probe that failed was sent
	failed   error
	inflight chan struct{} // closed when the probe under way ends
}

// ClusterHeader is what a cluster check learned: the etcd cluster's id and
// a revision it had reached. Exact: At is when the probe was sent, so etcd
// read Rev after At. Otherwise the header came with an answer to another
// request and At is when that answer arrived: etcd read Rev at some time
// before At, possibly before revisions this process has seen since.
type ClusterHeader struct {
	ID    uint64
	Rev   int64
	At    time.Time
	Exact bool
}

// Heard records the cluster id and revision of an answer etcd gave to
// another request, as it arrives.
func (p *HeaderProbe) Heard(id uint64, rev int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heard = ClusterHeader{ID: id, Rev: rev, At: time.Now()}
}

// Get returns the newest of: the last probe's answer, the last answer heard,
// the last probe's failure, if it is younger than maxAge; else it probes
// with fetch. maxAge 0 asks for a probe sent after the call, whose answer
// is exact. Concurrent callers share one probe; each
// waits for it no longer than its own ctx.
func (p *HeaderProbe) Get(ctx context.Context, maxAge time.Duration,
	fetch func(context.Context) (uint64, int64, error)) (ClusterHeader, error) {
	start := time.Now()
	fresh := func(at time.Time) bool {
		if maxAge == 0 {
			return !at.Before(start)
		}
		return !at.IsZero() && time.Since(at) < maxAge
	}
	for {
		p.mu.Lock()
		h, ok, err := p.known(fresh, maxAge > 0)
		wait := p.inflight
		if !ok && wait == nil {
			done := make(chan struct{})
			p.inflight = done
			p.mu.Unlock()
			return p.probe(ctx, fetch, done)
		}
		p.mu.Unlock()
		if ok {
			return h, err
		}
		select {
		case <-wait: // look again
		case <-ctx.Done():
			return ClusterHeader{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
}

// known is the newest of the last probe's answer, its failure and (heard)
// the last answer heard, if fresh; ok false: none is. The caller holds mu.
func (p *HeaderProbe) known(fresh func(time.Time) bool, heard bool) (ClusterHeader, bool, error) {
	switch {
	case fresh(p.failedAt) && p.failedAt.After(p.last.At) && p.failedAt.After(p.heard.At):
		return ClusterHeader{}, true, p.failed
	case fresh(p.last.At):
		return p.last, true, nil
	case heard && fresh(p.heard.At):
		return p.heard, true, nil
	}
	return ClusterHeader{}, false, nil
}

// probe sends one probe and records its answer, or its failure when etcd
// (not the caller's own ctx) failed it: callers within maxAge share that.
func (p *HeaderProbe) probe(ctx context.Context, fetch func(context.Context) (uint64, int64, error), done chan struct{}) (ClusterHeader, error) {
	at := time.Now()
	id, rev, err := fetch(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight = nil
	close(done)
	if err != nil {
		if ctx.Err() == nil {
			p.failedAt, p.failed = at, err
		}
		return ClusterHeader{}, err
	}
	p.last = ClusterHeader{ID: id, Rev: rev, At: at, Exact: true}
	return p.last, nil
}

// sharedHeaderStore is a store whose watchers share cluster probes.
type sharedHeaderStore interface {
	SharedHeader(ctx context.Context, maxAge time.Duration) (ClusterHeader, error)
}

// probeHeader asks the store for its cluster id and revision, sharing a
// recent probe or answer when the store can (maxAge 0: a probe of its own).
func probeHeader(ctx context.Context, store Store, maxAge time.Duration) (ClusterHeader, error) {
	if s, ok := store.(sharedHeaderStore); ok {
		return s.SharedHeader(ctx, maxAge)
	}
	at := time.Now()
	id, rev, err := store.Header(ctx)
	return ClusterHeader{ID: id, Rev: rev, At: at, Exact: true}, err
}

// watchCluster calls replaced when the store's cluster id changes or its
// revision falls below what the watch had seen before the probe was sent:
// etcd was replaced or restored underneath a reconnecting client. The probe
// may be shared with other watchers of the store, so it is compared with the
// revision this watch had seen at its previous check, which came before any
// probe young enough to be shared. A header heard with another answer only
// raises the question: etcd may have read it before the revision this watch
// saw, so a probe of the watch's own answers it.
func watchCluster(ctx context.Context, cfg WatcherConfig, clusterID uint64, seenRev *atomic.Int64, replaced func()) {
	t := time.NewTicker(ClusterCheckInterval)
	defer t.Stop()
	prevRev, prevAt := seenRev.Load(), time.Now()
	// Revisions only grow in one cluster, so a probe sent after we had
	// seen prevRev cannot answer less.
	moved := func(h ClusterHeader) bool {
		return h.ID != clusterID || (h.At.After(prevAt) && h.Rev < prevRev)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev0, at0 := seenRev.Load(), time.Now()
		h, err := probeHeader(ctx, cfg.Store, ClusterCheckInterval)
		if err == nil && !h.Exact && moved(h) {
			h, err = probeHeader(ctx, cfg.Store, 0)
		}
		if err != nil {
			continue
		}
		if moved(h) {
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
		// etcd sends a revision's events in one response (it cuts a batch
		// only between revisions), so within the response each emitted
		// event knows whether its revision goes on (WatchEvent.More). An
		// event is held until the next emitted one is known.
		var held WatchEvent
		holding := false
		for _, ev := range resp.Events {
			var out WatchEvent
			if ev.Type == EventDelete {
				if _, ok := known[ev.KV.Key]; !ok {
					*lastRev = max(*lastRev, ev.KV.ModRev)
					continue
				}
				delete(known, ev.KV.Key)
				out = WatchEvent{Kind: WatchDelete, Key: ev.KV.Key, Rev: ev.KV.ModRev}
			} else {
				known[ev.KV.Key] = ev.KV.ModRev
				out = WatchEvent{Kind: WatchPut, Key: ev.KV.Key, Value: ev.KV.Value, Rev: ev.KV.ModRev, CreateRev: ev.KV.CreateRev}
			}
			if holding {
				held.More = held.Rev == out.Rev
				emit(held)
			}
			held, holding = out, true
			*lastRev = max(*lastRev, ev.KV.ModRev)
		}
		if holding {
			emit(held)
		}
		*lastRev = max(*lastRev, resp.Rev)
		seenRev.Store(*lastRev)
	}
	return nil
}

// diffAndEmit emits what changed between the keys the consumer holds and a
// fresh list; with fresh set (a new cluster) every listed key is re-emitted
// because mod revisions of two clusters cannot be compared. Every event is
// More: the list is whole only at the WatchSynced that follows it.
func diffAndEmit(known map[string]int64, kvs []KeyValue, fresh bool, emit func(WatchEvent)) map[string]int64 {
	next := make(map[string]int64, len(kvs))
	for _, kvp := range kvs {
		next[kvp.Key] = kvp.ModRev
		if old, ok := known[kvp.Key]; fresh || !ok || old != kvp.ModRev {
			emit(WatchEvent{Kind: WatchPut, Key: kvp.Key, Value: kvp.Value, Rev: kvp.ModRev, CreateRev: kvp.CreateRev, More: true})
		}
	}
	for k := range known {
		if _, ok := next[k]; !ok {
			emit(WatchEvent{Kind: WatchDelete, Key: k, More: true})
		}
	}
	return next
}
