package app

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/internal/logrepeat"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/web"
	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
)

// openStorage opens the shard engine and the shard host of the storage role.
func (a *App) openStorage() error {
	dir := filepath.Join(a.cfg.DataDir, "shards")
	a.flushes = storage.NewFlushFailures(a.lg.Named("storage"))
	a.fence = storage.NewDiskFence(a.lg.Named("storage"), a.reg)
	flushReport := func(db string, shard int, err error) {
		a.flushes.Report(db, shard, err)
		a.fence.ReportFlush(db, shard, err)
	}
	opts := []engine.Option{engine.WithFlushReport(flushReport), engine.WithLogReport(a.fence.Report)}
	if a.cfg.FaultInjection {
		a.faults = &engine.Faults{}
		opts = append(opts, engine.WithFaults(a.faults))
	}
	if a.cfg.MemtableMaxBytes > 0 {
		opts = append(opts, engine.WithMemtableBytes(a.cfg.MemtableMaxBytes))
	}
	eng, err := engine.NewBoltEngine(dir, opts...)
	if err != nil {
		return err
	}
	a.engine = eng
	a.registerEngineMemory()
	a.host = storage.NewHost(storage.HostConfig{
		NodeID: a.nodeID, Cluster: a.cfg.StorageCluster, Engine: eng, State: a.sm.Snapshot,
		Changed: a.sm.Changed, Logger: a.lg, MinInsync: a.cfg.MinInsyncReplicas,
		DropDelay: a.cfg.ShardDropDelay, Dir: dir, Registerer: a.reg, Client: a.peerClient(0),
		QueryLimits: engine.Limits{MaxSeries: a.cfg.QueryMaxSeries, MaxPoints: a.cfg.QueryMaxPoints},
		StateStore:  a.store, StateKeys: a.keys, WriteFence: a.fence.Err, ExpireEvery: a.cfg.RetentionCheckInterval,
		MaxDiskPct: a.cfg.RetentionMaxDiskPct, DiskUsage: func() int { return storage.DiskUsedPct(a.cfg.DataDir) },
	})
	return nil
}

// storageRole is the storage role's part of the HTTP surface
// (web.StorageAPI).
type storageRole struct {
	host   *storage.Host
	fence  *storage.DiskFence
	faults *engine.Faults // nil without --fault-injection
	lg     *zap.Logger
}

var _ web.StorageAPI = (*storageRole)(nil)

// A broker in this process writes and selects on the shards it leads
// through the host, without HTTP.
var _ broker.LocalShards = (*storage.Host)(nil)

func (r *storageRole) Routes(g gin.IRouter) { r.host.Routes(g) }
func (r *storageRole) WriteFence() error    { return r.fence.Err() }
func (r *storageRole) FaultInjection() bool { return r.faults != nil }

// InjectFault makes the engine's log writes fail as a full disk ("full")
// or a failing one ("error") would, or lets them through again (""): POST
// /api/v1/debug/faults on a node started with --fault-injection.
func (r *storageRole) InjectFault(disk string) {
	var err error
	switch disk {
	case "full":
		err = syscall.ENOSPC
	case "error":
		err = syscall.EIO
	}
	r.faults.Set(err)
	r.lg.Warn("disk fault injection", zap.String("disk", disk))
}

// watched filters the sources this node watches. A storage node that is
// neither master nor broker watches only what its host needs: assignments
// and shard states, the database configs (incarnations), the storage
// configs (where its cluster's etcd is), the master key (a graceful stop
// asks the master for handoffs) and its cluster's live nodes. Not the
// in-sync sets. The live nodes' records change only when a node joins,
// leaves or really changes (liveness is the lease: no heartbeat writes), so
// watching them costs nothing at idle, and a follower learns at once that
// its leader's node id now lives at another address (a copy of a data dir,
// a real move) and looks it up again there, before the new incarnation's
// catch-up window drops it from the in-sync set.
func (a *App) watched(srcs []statemachine.Source) []statemachine.Source {
	if a.watchesNodes() {
		return srcs
	}
	return slices.DeleteFunc(srcs, func(s statemachine.Source) bool {
		switch s.Kind {
		case statemachine.KindMaster, statemachine.KindStorageConfig, statemachine.KindDatabaseConfig,
			statemachine.KindAssign, statemachine.KindShardState, statemachine.KindStorageNodes:
			return false
		}
		return true
	})
}

// watchesNodes: this process watches the live nodes (it is a master or a
// broker, or not a storage node).
func (a *App) watchesNodes() bool {
	return a.cfg.HasRole(config.RoleMaster) || a.cfg.HasRole(config.RoleBroker) || !a.cfg.HasRole(config.RoleStorage)
}

// transferLeader asks the master (local or remote) for a graceful handoff.
func (a *App) transferLeader(ctx context.Context, db string, shard int, node string) error {
	return a.masterOps.TransferLeader(ctx, db, shard, models.LeaderTransfer{NodeID: node})
}

// runStorage waits for this node's storage cluster to be configured, then
// hosts its shards and keeps the node registered in it.
func (a *App) runStorage(ctx context.Context) {
	if log, ok := a.engine.(engine.LogHealer); ok {
		a.goRun(ctx, func(ctx context.Context) { a.fence.Run(ctx, log) })
	}
	warned := false
	unreachable := logrepeat.New(a.lg, 30*time.Second, nil)
	for {
		changed := a.sm.Changed()
		st := a.sm.Snapshot()
		if cfg, ok := st.StorageClusters[a.cfg.StorageCluster]; ok {
			store, ck, err := a.clusters.get(cfg)
			if err == nil {
				a.host.Attach(store, ck)
				// Shards are served only once this process holds its node id's
				// record: a copy of the data dir must never lead or follow.
				hctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				var once sync.Once
				registered := func() {
					a.holding.Store(true)
					once.Do(func() { go func() { defer close(done); a.host.Run(hctx) }() })
				}
				err := storage.RunNode(ctx, storage.NodeConfig{Store: store, Keys: ck, NodeID: a.nodeID, Address: a.cfg.AdvertiseAddr,
					Cluster: cfg.Name, Labels: a.cfg.NodeLabels, Weight: a.cfg.NodeWeight, TTL: a.cfg.LeaseTTL, Report: a.host.Following, ReportVersion: a.host.FollowingVersion, DataDir: a.cfg.DataDir, MaxTerm: a.host.MaxTerms, SeenTerm: a.host.SeenTerms, FlushFailing: a.flushes.Failing, DiskFault: a.fence.Fault, DiskPressure: a.host.DiskPressure, Logger: a.lg.Named("storage"), Registered: registered, Held: a.host.SetRecordRev})
				cancel()
				once.Do(func() { close(done) })
				<-done
				a.failOn(err)
				return
			}
			unreachable.Warn(cfg.Name, "cannot reach storage cluster", zap.String("cluster", cfg.Name), zap.Error(err))
		} else if !warned && !a.cfg.Standalone && len(st.Synced) > 0 {
			a.lg.Warn("storage cluster not configured yet; waiting (create it with POST /api/v1/storage-clusters)",
				zap.String("cluster", a.cfg.StorageCluster))
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}
