// Package app assembles a Cairn node from its roles: the embedded etcd
// member, the state manager every role reads from, the master candidate, the
// broker and the storage node, behind one HTTP server. It owns their start
// order and their shutdown order.
package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/broker/influx"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/embedded"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/internal/certs"
	"github.com/cairn-db/cairn/internal/problems"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/web"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// App is one running node.
type App struct {
	cfg    config.Config
	lg     *zap.Logger
	nodeID string
	keys   models.Keys

	etcd   *embedded.Server
	store  *kv.EtcdStore
	sm     *statemachine.Manager
	http   *web.Server
	reg    *prometheus.Registry
	etcdUp atomic.Bool
	// etcdAlarms are the alarms etcd reported at the last probe (NOSPACE...).
	etcdAlarms atomic.Pointer[[]string]
	alarmGauge *prometheus.GaugeVec
	// clusterUp, clusterDown, clusterProbed: the storage clusters on an
	// etcd of their own, as probeClusters last saw them.
	clusterUp     *prometheus.GaugeVec
	clusterDownMu sync.Mutex
	clusterDown   map[string]problems.ClusterEtcd
	clusterProbed map[string]bool

	masterOps *masterSlot
	clusters  *clusterStores
	engine    engine.Engine
	host      *storage.Host
	flushes   *storage.FlushFailures // shards whose background flush fails
	fence     *storage.DiskFence     // refuses writes while the log is failed
	faults    *engine.Faults         // --fault-injection: the log's injected faults
	holding   atomic.Bool            // the storage role holds its node record (registered)
	askClient *http.Client           // the master's questions to storage nodes at failover

	tls   *certs.Material // nil without --tls-cert
	peer  http.RoundTripper
	guard func(*http.Request) error // the internal API's; nil when open

	wg     sync.WaitGroup
	runCtx context.Context // ends at Stop; the roles' goroutines run under it
	cancel context.CancelFunc
	fatal  chan error // a role that cannot go on (its node id is held by another process)

	metrics nodeMetrics
	history *nodeHistory
}

// Start brings the node up: it returns once the HTTP server listens and the
// embedded etcd member, if any, serves. Wait then blocks until the end.
func Start(cfg config.Config, lg *zap.Logger) (*App, error) {
	a, err := prepare(cfg, lg)
	if err != nil {
		return nil, err
	}
	roles := a.roles()
	wcfg := a.webConfig()
	for _, r := range roles {
		if r.open == nil {
			continue
		}
		if err := r.open(&wcfg); err != nil {
			a.shutdown()
			return nil, fmt.Errorf("%s role: %w", r.name, err)
		}
	}
	if err := a.preflightNodeID(); err != nil {
		a.shutdown()
		return nil, err
	}
	a.history = a.newHistory()
	wcfg.History = a.history
	a.http = web.New(wcfg)
	if err := a.http.Listen(); err != nil {
		a.shutdown()
		return nil, err
	}
	if cfg.HasRole(config.RoleEtcd) {
		// A member of a new multi-member cluster waits here for quorum.
		if err := a.startEtcdMember(); err != nil {
			_ = a.http.Shutdown(context.Background())
			a.shutdown()
			return nil, err
		}
	}
	// Watch only now: with an embedded member the first list then succeeds
	// at once instead of backing off while the member starts.
	for _, src := range a.watched(statemachine.MainSources(a.store, a.keys)) {
		a.sm.AddSource(src)
	}
	for _, run := range []func(context.Context){a.probeEtcd, a.warnEtcdAuthOff, a.history.rec.Run, a.watchClusters, a.probeClusters} {
		a.goRun(a.runCtx, run)
	}
	if cfg.Standalone {
		a.goRun(a.runCtx, a.ensureDefaultCluster)
	}
	for _, r := range roles {
		if r.run != nil {
			a.goRun(a.runCtx, r.run)
		}
	}
	return a, nil
}

// nodeRole is one role of the node as Start wires it: open adds what the
// role serves to the HTTP server's config before it listens; run is the
// role's background work, started once the node watches etcd.
type nodeRole struct {
	name string
	open func(w *web.Config) error
	run  func(ctx context.Context)
}

// roles lists the node's roles in the order they open: storage before the
// broker (a broker on a storage node writes to its local shards directly).
// The etcd role is the embedded member, started by Start once the HTTP
// server listens.
func (a *App) roles() []nodeRole {
	var out []nodeRole
	if a.cfg.HasRole(config.RoleStorage) {
		out = append(out, nodeRole{name: config.RoleStorage, open: a.openStorageRole, run: a.runStorage})
	}
	if a.cfg.HasRole(config.RoleBroker) {
		out = append(out, nodeRole{name: config.RoleBroker, open: a.openBrokerRole, run: a.runBroker})
	}
	if a.cfg.HasRole(config.RoleMaster) {
		out = append(out, nodeRole{name: config.RoleMaster, run: a.runMasterCandidate})
	}
	return out
}

// prepare builds what every role shares: metrics, the data dir and its node
// id, security, the etcd client (it connects lazily, so everything up to
// the HTTP server works before etcd answers: /health needs no etcd) and the
// state manager, started from the local backup.
func prepare(cfg config.Config, lg *zap.Logger) (*App, error) {
	a := &App{cfg: cfg, lg: lg, keys: models.Keys{NS: cfg.Namespace}, reg: prometheus.NewRegistry(), masterOps: &masterSlot{},
		fatal: make(chan error, 1)}
	a.alarmGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_etcd_alarm",
		Help: "1 while etcd reports this alarm (nospace: etcd refuses metadata changes until an operator frees space and disarms it)"}, []string{"type"})
	a.reg.MustRegister(a.alarmGauge)
	a.clusterUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_cluster_etcd_up",
		Help: "1 while the etcd of a storage cluster with endpoints of its own answers; 0: that cluster's failover is impossible"}, []string{"cluster"})
	a.reg.MustRegister(a.clusterUp)
	a.clusterDown, a.clusterProbed = map[string]problems.ClusterEtcd{}, map[string]bool{}
	for _, typ := range etcdAlarmTypes {
		a.alarmGauge.WithLabelValues(typ).Set(0)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := checkDataFormat(cfg.DataDir); err != nil {
		return nil, err
	}
	id, err := config.LoadOrCreateNodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	a.nodeID = id
	a.masterOps.init(a)
	a.lg = lg.With(zap.String("node_id", id))
	a.lg.Info("starting", zap.Strings("roles", cfg.Roles), zap.String("http_addr", cfg.HTTPAddr), zap.String("data_dir", cfg.DataDir))
	if err := a.setupSecurity(); err != nil {
		return nil, err
	}
	a.masterOps.forward.Client = a.peerClient(10 * time.Second)
	a.askClient = a.peerClient(0) // each question carries its own short deadline

	a.metrics.etcd = kv.NewEtcdMetrics(a.reg)
	a.store, err = kv.NewEtcdStore(a.etcdConfig(cfg.EtcdEndpoints))
	if err != nil {
		return nil, err
	}
	a.clusters = newClusterStores(a.store, a.etcdConfig, a.keys)
	a.masterOps.store, a.masterOps.keys = a.store, a.keys

	a.sm = statemachine.New(statemachine.Config{Logger: a.lg, BackupPath: filepath.Join(cfg.DataDir, "state.backup"), Registerer: a.reg})
	a.registerMetrics()
	if _, err := a.sm.LoadBackup(); err != nil {
		a.lg.Warn("local state backup unusable; starting empty", zap.Error(err))
	}
	a.runCtx, a.cancel = context.WithCancel(context.Background())
	a.sm.Start(a.runCtx)
	return a, nil
}

// webConfig is the HTTP server's config every node has: state, health,
// metrics, the console, the operators list and security; the roles add
// their parts.
func (a *App) webConfig() web.Config {
	cfg := a.cfg
	w := web.Config{
		Addr: cfg.HTTPAddr, NodeID: a.nodeID, Roles: cfg.Roles, Logger: a.lg,
		Gatherer: a.reg, State: a.sm.Snapshot, Health: nodeHealth{a}, Master: a.masterOps, Console: consoleHandler(),
		WriteMaxBodyBytes: int64(cfg.WriteMaxBodyBytes), WriteMaxInflightBytes: cfg.InflightWriteBytes(),
		WriteBodyTimeout: cfg.WriteBodyTimeout,
	}
	a.webSecurity(&w)
	return w
}

// openStorageRole opens the engine and the shard host; the replication
// endpoints join the HTTP server.
func (a *App) openStorageRole(w *web.Config) error {
	if err := a.openStorage(); err != nil {
		return err
	}
	w.Storage = &storageRole{host: a.host, fence: a.fence, faults: a.faults, lg: a.lg}
	return nil
}

// openBrokerRole wires the admin API, the data path (local shards directly
// when this node stores them) and the Influx endpoints.
func (a *App) openBrokerRole(w *web.Config) error {
	cfg := a.cfg
	admin := a.admin()
	data := &broker.Data{State: a.sm.Snapshot, Changed: a.sm.Changed, Client: a.peerClient(0), Metrics: a.metrics.broker,
		WriteTimeout: cfg.WriteTimeout, MaxPoints: cfg.WriteMaxPoints, LineLimits: lineproto.Limits{SeriesKeyBytes: cfg.WriteMaxSeriesKeyBytes,
			TagValueBytes: cfg.WriteMaxTagValueBytes, NameBytes: cfg.WriteMaxNameBytes, Tags: cfg.WriteMaxTags},
		QueryMaxSeries: cfg.QueryMaxSeries, QueryMaxPoints: cfg.QueryMaxPoints}
	if a.host != nil {
		data.Self, data.Local = a.nodeID, a.host
	}
	w.Broker = &brokerRole{admin: admin, data: data, ask: a.askTxn,
		influx: influx.New(influx.Config{Backend: data, Logger: a.lg, MaxBodyBytes: int64(cfg.WriteMaxBodyBytes),
			QueryMaxBytes: cfg.QueryMaxBytes, QueryTimeout: cfg.QueryTimeout,
			Admin: admin, Authorize: w.Tokens.AllowStatement,
			Defaults: influx.Defaults{Shards: cfg.DefaultShards, ReplicaFactor: cfg.DefaultReplicaFactor, StorageCluster: cfg.DefaultStorageCluster}})}
	return nil
}

// runBroker keeps the broker's leased record registered; another live
// process holding the node id stops this one.
func (a *App) runBroker(ctx context.Context) {
	reg := kv.Registration{Key: a.keys.Broker(a.nodeID), TTL: a.cfg.LeaseTTL,
		Value: broker.BrokerRecord(a.nodeID, a.cfg.AdvertiseAddr, time.Now()), Owner: broker.BrokerOwner(a.cfg.AdvertiseAddr)}
	if err := kv.KeepRegistered(ctx, a.store, reg, a.lg.Named("broker")); err != nil {
		a.failOn(fmt.Errorf("broker node id %q is in use by another live process: %w", a.nodeID, err))
	}
}

// startEtcdMember starts the embedded etcd member.
func (a *App) startEtcdMember() error {
	cfg := a.cfg
	var err error
	a.etcd, err = embedded.Start(embedded.Config{
		Name: cfg.EtcdName, Dir: filepath.Join(cfg.DataDir, "etcd"),
		ListenClientURL: cfg.EtcdListenClientURL, ListenPeerURL: cfg.EtcdListenPeerURL,
		AdvertiseClientURL: cfg.EtcdAdvertiseClientURL, AdvertisePeerURL: cfg.EtcdAdvertisePeerURL,
		InitialCluster: cfg.EtcdInitialCluster, ClusterState: cfg.EtcdClusterState, Logger: a.lg,
		QuotaBackendBytes: cfg.EtcdQuotaBackendBytes,
		ClientTLS: embedded.TLS{CertFile: cfg.EtcdCertFile, KeyFile: cfg.EtcdKeyFile,
			TrustedCAFile: cfg.EtcdTrustedCAFile, ClientCertAuth: cfg.EtcdClientCertAuth},
		PeerTLS: embedded.TLS{CertFile: cfg.EtcdPeerCertFile, KeyFile: cfg.EtcdPeerKeyFile,
			TrustedCAFile: cfg.EtcdPeerTrustedCAFile, ClientCertAuth: cfg.EtcdPeerClientCertAuth},
	})
	return err
}

func (a *App) etcdConfig(endpoints []string) kv.EtcdConfig {
	return kv.EtcdConfig{Endpoints: endpoints, CACert: a.cfg.EtcdCACert, Cert: a.cfg.EtcdCert, Key: a.cfg.EtcdKey,
		Username: a.cfg.EtcdUsername, Password: a.cfg.EtcdPassword, Namespace: a.cfg.Namespace, Logger: a.lg, Metrics: a.metrics.etcd}
}

func (a *App) goRun(ctx context.Context, fn func(ctx context.Context)) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn(ctx)
	}()
}

// NodeID is this node's id.
func (a *App) NodeID() string { return a.nodeID }

// HTTPAddr is the bound HTTP address.
func (a *App) HTTPAddr() string { return a.http.Addr() }

// State is the node's current snapshot.
func (a *App) State() *statemachine.State { return a.sm.Snapshot() }

// Wait blocks until ctx ends or a server fails.
func (a *App) Wait(ctx context.Context) error {
	var etcdErr <-chan error
	if a.etcd != nil {
		etcdErr = a.etcd.Err()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.http.Done():
		if err != nil {
			return fmt.Errorf("http server: %w", err)
		}
		return errors.New("http server stopped")
	case err := <-etcdErr:
		return fmt.Errorf("embedded etcd: %w", err)
	case err := <-a.fatal:
		return err
	}
}

// failOn stops the node with err (nil: nothing happened).
func (a *App) failOn(err error) {
	if err == nil {
		return
	}
	a.lg.Error("cannot go on; stopping", zap.Error(err))
	select {
	case a.fatal <- err:
	default:
	}
}

// Stop shuts the node down: HTTP first (no new work), then the roles (the
// master resigns, leases are revoked so peers react at once), the state
// manager (final backup), Cairn's etcd clients, and the etcd member last.
func (a *App) Stop() {
	a.lg.Info("stopping")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.host != nil {
		// Hand leaderships over while we still serve replication.
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		a.host.Handoff(hctx, a.transferLeader)
		hcancel()
	}
	_ = a.http.Shutdown(ctx)
	a.shutdown()
	a.lg.Info("stopped")
}

func (a *App) shutdown() {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	if a.engine != nil {
		_ = a.engine.Close()
	}
	if a.sm != nil {
		a.sm.Stop()
	}
	a.clusters.close()
	if a.store != nil {
		_ = a.store.Close()
	}
	a.closeEtcd()
}

func (a *App) closeEtcd() {
	if a.etcd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	a.etcd.Close(ctx)
}

// probeEtcd tracks whether etcd answers, for /ready and the console banner.
func (a *App) probeEtcd(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var alarmsAt time.Time
	for {
		// Shared with the watchers' cluster checks: one probe per 2s, none
		// while lease renewals are answered.
		pctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
		_, err := a.store.SharedHeader(pctx, 2*time.Second)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if up := err == nil; up != a.etcdUp.Swap(up) {
			switch {
			case up:
				a.lg.Info("etcd reachable again")
			case errors.Is(err, kv.ErrAccessDenied):
				a.lg.Error("etcd refused this node's credentials (--etcd-username and --etcd-password[-file], or --etcd-cert's common name; see cairn etcd-auth-setup): serving from the local state copy; metadata changes are refused", zap.Error(err))
			default:
				a.lg.Warn("etcd unreachable: serving from the local state copy; metadata changes are refused", zap.Error(err))
			}
		}
		// Alarms each alarmEvery, each second while one is raised (to
		// see it cleared at once) or etcd was away.
		if now := time.Now(); err == nil && (now.Sub(alarmsAt) >= alarmEvery || len(a.currentAlarms()) > 0) {
			alarmsAt = now
			a.probeAlarms(ctx)
		} else if err != nil {
			alarmsAt = time.Time{}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// alarmEvery is how often a node asks etcd for its alarms while none is
// raised (a write refused meanwhile says NOSPACE by itself).
const alarmEvery = 5 * time.Second

// etcdAlarmTypes are the alarms the cairn_etcd_alarm gauge always exports.
var etcdAlarmTypes = []string{"nospace", "corrupt"}

// probeAlarms reads etcd's alarms into /ready and the cairn_etcd_alarm gauge,
// logging each change once.
func (a *App) probeAlarms(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	alarms, err := a.store.Alarms(actx)
	cancel()
	if err != nil {
		return // keep the last answer: etcd flapping is what etcdUp shows
	}
	for i := range alarms {
		alarms[i] = strings.ToLower(alarms[i])
	}
	prev := a.currentAlarms()
	a.etcdAlarms.Store(&alarms)
	for _, typ := range etcdAlarmTypes {
		v := 0.0
		if slices.Contains(alarms, typ) {
			v = 1
		}
		a.alarmGauge.WithLabelValues(typ).Set(v)
	}
	if slices.Equal(prev, alarms) {
		return
	}
	if slices.Contains(alarms, "nospace") {
		a.lg.Error("etcd raised its NOSPACE alarm: metadata changes (DDL, failover, placement) are refused until it is cleared; " +
			"compact and defragment etcd or raise --etcd-quota-backend-bytes, then run etcdctl alarm disarm")
	} else if len(alarms) == 0 {
		a.lg.Info("etcd alarms cleared")
	} else {
		a.lg.Warn("etcd alarms raised", zap.Strings("alarms", alarms))
	}
}

// currentAlarms are the etcd alarms seen at the last probe, lower case.
func (a *App) currentAlarms() []string {
	if p := a.etcdAlarms.Load(); p != nil {
		return *p
	}
	return nil
}

// ensureDefaultCluster creates the storage cluster "default" on a standalone
// node's first start, retrying until etcd answers.
func (a *App) ensureDefaultCluster(ctx context.Context) {
	admin := &meta.Admin{Store: a.store, Keys: a.keys, State: a.sm.Snapshot, Changed: a.sm.Changed}
	for ctx.Err() == nil {
		_, err := admin.CreateStorageCluster(ctx, models.StorageCluster{Name: a.cfg.StorageCluster})
		if err == nil || errors.Is(err, models.ErrConflict) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
