package storage

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// HostConfig configures the shard host of a storage node.
type HostConfig struct {
	NodeID  string
	Cluster string
	Engine  engine.Engine
	Store   coordinator.Store // the storage cluster's etcd (in-sync sets)
	Keys    models.ClusterKeys
	State   func() *statemachine.State
	Changed <-chan struct{}
	Logger  *zap.Logger
	// MinInsync is the fewest in-sync replicas a write needs; default 1.
	MinInsync int
	// LagBound: a follower that has not caught up for this long leaves the
	// in-sync set; default 2s.
	LagBound time.Duration
	// AckTimeout bounds how long a write waits for in-sync replicas; default 10s.
	AckTimeout time.Duration
}

// Host opens and closes shard replicas as assignments change and serves the
// replication protocol: Shardz's serve / stop-serving hooks, level-triggered.
type Host struct {
	cfg     HostConfig
	nodeID  string
	cluster string
	store   coordinator.Store
	ck      models.ClusterKeys
	state   func() *statemachine.State
	lg      *zap.Logger
	client  *http.Client

	mu       sync.RWMutex
	replicas map[string]*replica
}

// NewHost builds a host; Run drives it.
func NewHost(cfg HostConfig) *Host {
	if cfg.MinInsync == 0 {
		cfg.MinInsync = 1
	}
	if cfg.LagBound == 0 {
		cfg.LagBound = 2 * time.Second
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	return &Host{cfg: cfg, nodeID: cfg.NodeID, cluster: cfg.Cluster, store: cfg.Store, ck: cfg.Keys, state: cfg.State,
		lg: cfg.Logger.Named("shards"), client: &http.Client{Transport: tr}, replicas: map[string]*replica{}}
}

// Attach sets the storage cluster's store once its config is known; call
// before Run.
func (h *Host) Attach(store coordinator.Store, ck models.ClusterKeys) {
	h.store, h.ck = store, ck
}

// Run reconciles replicas with the published state until ctx ends, then stops
// every replica (data stays on disk).
func (h *Host) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		h.reconcile()
		select {
		case <-ctx.Done():
			h.mu.Lock()
			reps := h.replicas
			h.replicas = map[string]*replica{}
			h.mu.Unlock()
			for _, r := range reps {
				r.stop()
			}
			return
		case <-h.cfg.Changed:
		case <-t.C:
		}
	}
}

// reconcile converges replicas to the snapshot: open what is assigned here,
// set each replica's role and term, close and drop what is not.
func (h *Host) reconcile() {
	st := h.state()
	want := map[string]desired{}
	for name, a := range st.Assignments {
		if a.Cluster != h.cluster {
			continue
		}
		if _, ok := st.Databases[name]; !ok {
			continue
		}
		for _, sh := range a.Shards {
			if !slices.Contains(sh.Replicas, h.nodeID) {
				continue
			}
			d := desired{role: roleIdle, replicas: sh.Replicas}
			if s, ok := st.ShardState(name, sh.ID); ok && s.Status == models.StatusOnline {
				d.term = s.Term
				if s.Leader == h.nodeID {
					d.role = roleLeader
				} else if n, live := st.Nodes[h.cluster][s.Leader]; live {
					d.role, d.leader, d.address = roleFollower, s.Leader, n.NodeAddress
				} else {
					d.leader = s.Leader
				}
			}
			want[models.ShardID(name, sh.ID)] = d
		}
	}
	for id, d := range want {
		h.mu.RLock()
		r := h.replicas[id]
		h.mu.RUnlock()
		if r == nil {
			db, shard, _ := models.ParseShardID(id)
			s, err := h.cfg.Engine.Open(db, shard)
			if err != nil {
				h.lg.Error("cannot open shard", zap.String("shard", id), zap.Error(err))
				continue
			}
			r = newReplica(h, db, shard, s)
			h.mu.Lock()
			h.replicas[id] = r
			h.mu.Unlock()
			h.lg.Info("serving shard", zap.String("shard", id))
		}
		r.setDesired(d)
	}
	// Dropping data only on a state confirmed by etcd: a partial or
	// backup-loaded view must never delete a replica.
	if st.FromBackup || !st.Synced[statemachine.SourceAssign] || !st.Synced[statemachine.SourceDatabaseConfig] {
		return
	}
	h.mu.Lock()
	var gone []*replica
	for id, r := range h.replicas {
		if _, ok := want[id]; !ok {
			gone = append(gone, r)
			delete(h.replicas, id)
		}
	}
	h.mu.Unlock()
	for _, r := range gone {
		r.stop()
		if err := h.cfg.Engine.Drop(r.db, r.shard); err != nil {
			h.lg.Warn("cannot drop shard data", zap.String("shard", r.id), zap.Error(err))
			continue
		}
		h.lg.Info("stopped serving shard; data dropped", zap.String("shard", r.id))
	}
}

func (h *Host) get(db string, shard int) *replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.replicas[models.ShardID(db, shard)]
}

// Report gives the per-shard fields of the node record: last txn id of every
// replica and the leader each follower follows.
func (h *Host) Report() (map[string]uint64, map[string]string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	last := make(map[string]uint64, len(h.replicas))
	following := map[string]string{}
	for id, r := range h.replicas {
		last[id] = r.eng.LastTxnID()
		r.mu.Lock()
		if r.want.role == roleFollower {
			following[id] = r.want.leader
		}
		r.mu.Unlock()
	}
	return last, following
}

// Leading lists the shards this node leads, with their terms.
func (h *Host) Leading() map[string]int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := map[string]int64{}
	for id, r := range h.replicas {
		r.mu.Lock()
		if r.want.role == roleLeader {
			out[id] = r.want.term
		}
		r.mu.Unlock()
	}
	return out
}
