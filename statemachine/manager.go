package statemachine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Source is one watched prefix.
type Source struct {
	Name    string // unique, stable across restarts (it keys the backup)
	Store   kv.Store
	Prefix  string
	Kind    Kind
	Cluster string // storage cluster, for cluster-scoped kinds
}

// Config of a Manager.
type Config struct {
	Logger     *zap.Logger
	BackupPath string // "" disables the local backup
	// BackupWait is the shortest time between two backup writes (each
	// rewrites the whole file); default 5s. Stop writes a final one.
	BackupWait time.Duration
	QueueSize  int // default 4096
	Registerer prometheus.Registerer
	// Now dates events (departed nodes); default time.Now.
	Now func() time.Time
}

// Manager is the one consumer of the one event queue.
type Manager struct {
	cfg   Config
	lg    *zap.Logger
	queue chan Event
	cur   atomic.Pointer[State]
	next  atomic.Pointer[chan struct{}] // closed at the next publication

	srcMu   sync.Mutex
	sources map[string]*runningSource
	wg      sync.WaitGroup // watchers
	loopWG  sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc

	// seed holds the keys replayed from the backup, per source; read-only
	// after LoadBackup.
	seed map[string]map[string]int64
	// owned by the consumer goroutine
	raw    map[string]*rawSource
	backup *backupWriter

	applied   prometheus.Counter
	lastRev   prometheus.Gauge
	backupAge prometheus.GaugeFunc
}

type runningSource struct {
	src    Source
	cancel context.CancelFunc
	done   chan struct{}
}

// New makes a Manager; Start runs it.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 4096
	}
	if cfg.BackupWait == 0 {
		cfg.BackupWait = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Manager{
		cfg: cfg, lg: cfg.Logger.Named("state"), queue: make(chan Event, cfg.QueueSize),
		sources: map[string]*runningSource{}, raw: map[string]*rawSource{}, seed: map[string]map[string]int64{},
	}
	m.cur.Store(emptyState())
	ch := make(chan struct{})
	m.next.Store(&ch)
	m.backup = newBackupWriter(cfg.BackupPath, m.lg)
	m.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_state_events_applied_total", Help: "Events applied to the local state store."})
	m.lastRev = prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_state_last_revision", Help: "Highest etcd revision applied to the local state store."})
	m.backupAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_state_backup_age_seconds", Help: "Seconds since the local state backup was last written (-1: never)."}, m.backup.age)
	if cfg.Registerer != nil {
		qd := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_state_queue_depth", Help: "Events waiting in the state manager's queue."},
			func() float64 { return float64(len(m.queue)) })
		cfg.Registerer.MustRegister(m.applied, m.lastRev, m.backupAge, qd)
	}
	return m
}

// Snapshot returns the current state. It never locks or allocates.
func (m *Manager) Snapshot() *State { return m.cur.Load() }

// Changed returns a channel closed at the next publication: the one wake-up
// signal. It is a broadcast that leaves nothing behind, so a waiter of any
// lifetime takes a fresh one each round, before it reads Snapshot (so no
// publication between the two is missed):
//
//	for {
//		changed := m.Changed()
//		work(m.Snapshot())
//		select { case <-changed: case <-ctx.Done(): return }
//	}
func (m *Manager) Changed() <-chan struct{} { return *m.next.Load() }

// LoadBackup replays the local backup file (if any) into the queue before the
// watchers start; they then diff against it. Call before Start.
func (m *Manager) LoadBackup() (bool, error) {
	if m.cfg.BackupPath == "" {
		return false, nil
	}
	f, err := ReadBackupFile(m.cfg.BackupPath)
	if err != nil || f == nil {
		return false, err
	}
	for name, rs := range f.Sources {
		r := &rawSource{src: Source{Name: name, Prefix: rs.Prefix, Kind: rs.Kind, Cluster: rs.Cluster}, rev: rs.Rev}
		known := make(map[string]int64, len(rs.KVs))
		for _, kvp := range rs.KVs {
			known[kvp.Key] = kvp.ModRev
			r.kvs = r.kvs.Set(kvp.Key, rawKV{value: kvp.Value, modRev: kvp.ModRev, createRev: kvp.CreateRev})
			v, err := decode(rs.Kind, nameOf(kvp.Key, rs.Prefix), kvp.Value, kvp.CreateRev)
			if err != nil {
				continue
			}
			m.fold(Event{Source: name, Kind: rs.Kind, Cluster: rs.Cluster, Type: kv.WatchPut,
				Name: nameOf(kvp.Key, rs.Prefix), Value: v, Rev: kvp.ModRev})
		}
		m.raw[name] = r
		m.seed[name] = known
	}
	m.fold(Event{BackupLoaded: true})
	m.lg.Info("serving state from local backup until etcd answers", zap.String("path", m.cfg.BackupPath),
		zap.Time("saved_at", time.UnixMilli(f.SavedAt)))
	return true, nil
}

// fold applies one event outside the loop (only before Start).
func (m *Manager) fold(ev Event) {
	b := newBuilder(m.cur.Load())
	b.apply(ev)
	m.cur.Store(b.s)
}

// Start runs the consumer until ctx ends or Stop.
func (m *Manager) Start(ctx context.Context) {
	m.ctx, m.cancel = context.WithCancel(ctx)
	m.backup.start(m.ctx)
	m.loopWG.Add(1)
	go m.loop()
}

// AddSource starts watching a source (idempotent by name).
func (m *Manager) AddSource(src Source) {
	m.srcMu.Lock()
	defer m.srcMu.Unlock()
	if _, ok := m.sources[src.Name]; ok || m.ctx == nil || m.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	rs := &runningSource{src: src, cancel: cancel, done: make(chan struct{})}
	m.sources[src.Name] = rs
	known := m.seed[src.Name]
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(rs.done)
		kv.RunWatcher(ctx, kv.WatcherConfig{Store: src.Store, Prefix: src.Prefix, Known: known, Logger: m.lg},
			func(we kv.WatchEvent) { m.push(ctx, src, we) })
	}()
}

// RemoveSource stops watching and drops the source's keys from the state.
func (m *Manager) RemoveSource(name string) {
	m.srcMu.Lock()
	rs, ok := m.sources[name]
	delete(m.sources, name)
	m.srcMu.Unlock()
	if !ok {
		return
	}
	rs.cancel()
	<-rs.done
	select {
	case m.queue <- Event{Source: name, Kind: rs.src.Kind, Cluster: rs.src.Cluster, Removed: true}:
	case <-m.ctx.Done():
	}
}

// Sources lists the names being watched.
func (m *Manager) Sources() []Source {
	m.srcMu.Lock()
	defer m.srcMu.Unlock()
	out := make([]Source, 0, len(m.sources))
	for _, rs := range m.sources {
		out = append(out, rs.src)
	}
	return out
}

func (m *Manager) push(ctx context.Context, src Source, we kv.WatchEvent) {
	ev := Event{Source: src.Name, Kind: src.Kind, Cluster: src.Cluster, Type: we.Kind, Rev: we.Rev, More: we.More,
		Name: nameOf(we.Key, src.Prefix), ClusterID: we.ClusterID, At: m.cfg.Now().UnixMilli()}
	if we.Kind != kv.WatchSynced {
		ev.raw = &rawChange{src: src, key: we.Key, value: we.Value, modRev: we.Rev, createRev: we.CreateRev, del: we.Kind == kv.WatchDelete}
	}
	if we.Kind == kv.WatchPut {
		v, err := decode(src.Kind, ev.Name, we.Value, we.CreateRev)
		if err != nil {
			// The source's revision still advances (waiters on it must not
			// hang), but the key keeps its last good value and that value's
			// mod revision: a guarded write then fails instead of
			// overwriting what nobody could read.
			m.lg.Warn("undecodable value ignored", zap.String("key", we.Key), zap.Int64("mod_revision", we.Rev), zap.Error(err))
			ev.Invalid = err.Error()
		}
		ev.Value = v
	}
	select {
	case m.queue <- ev:
	case <-ctx.Done():
	}
}

// Push enqueues a pre-decoded event (benchmarks and tests of the reducers).
// Undated events are dated now.
func (m *Manager) Push(ev Event) {
	if ev.At == 0 {
		ev.At = m.cfg.Now().UnixMilli()
	}
	m.queue <- ev
}

func (m *Manager) loop() {
	defer m.loopWG.Done()
	const maxBatch = 1024
	batch := make([]Event, 0, maxBatch)
	var backupDue <-chan time.Time // set while a backup is waiting for its debounce
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-backupDue:
			backupDue = nil
			m.backup.submit(m.rawSnapshot())
			continue
		case ev := <-m.queue:
			batch = append(batch[:0], ev)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case ev := <-m.queue:
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		m.publish(batch)
		if backupDue == nil && m.cfg.BackupPath != "" {
			backupDue = time.After(m.cfg.BackupWait)
		}
	}
}

// publish applies a batch of events to the current state and publishes the
// result: each event costs the size of what it changes, not of the state.
func (m *Manager) publish(batch []Event) {
	prev := m.cur.Load()
	b := newBuilder(prev)
	var maxRev int64
	for _, ev := range batch {
		b.apply(ev)
		if ev.Removed {
			delete(m.raw, ev.Source)
		} else if ev.raw != nil {
			m.recordRaw(ev.raw, b.tok)
		}
		maxRev = max(maxRev, ev.Rev)
	}
	if b.s.FromBackup && allSynced(b.s, m.Sources()) {
		b.s.FromBackup = false
	}
	b.s.Seq = prev.Seq + 1
	m.cur.Store(b.s)
	m.applied.Add(float64(len(batch)))
	if maxRev > 0 {
		m.lastRev.Set(float64(maxRev))
	}
	m.notify()
}

// allSynced: every source of Cairn's own etcd has listed. Storage clusters
// in other etcds report their own readiness through Synced; one unreachable
// cluster must not keep the whole node on its backup.
func allSynced(s *State, srcs []Source) bool {
	n := 0
	for _, src := range srcs {
		if src.Kind.ClusterScoped() {
			continue
		}
		if !s.Synced[src.Name] {
			return false
		}
		n++
	}
	return n > 0
}

func (m *Manager) notify() {
	ch := make(chan struct{})
	close(*m.next.Swap(&ch))
}

// Stop ends watchers and the consumer, then writes a final backup.
func (m *Manager) Stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
	m.loopWG.Wait()
	m.backup.flush(m.rawSnapshot)
}
