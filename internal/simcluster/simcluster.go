// Package simcluster runs a whole Cairn cluster to measure the control plane
// at scale (`cairn simulate cluster`): a real etcd, the real master and one
// broker (the cairn binary with roles etcd,master,broker, in a child process
// as in a deployment), and, in this process, N storage agents built from the
// real storage code (registration, shard host
// reconcile, replication and in-sync upkeep, failover answers) over an
// in-memory engine. The agents share one local state store (every storage
// node of a real cluster keeps its own copy of the same keys), so what is
// measured is etcd, the master and the agents' own work, not N decodes of
// every event.
package simcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/gin-gonic/gin"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ErrInvalidParams means the simulation was asked for something impossible.
var ErrInvalidParams = errors.New("invalid simulate cluster parameters")

// Params of one simulation.
type Params struct {
	Nodes, Databases, Shards, Replicas int
	Idle                               time.Duration // how long the idle cluster is measured
	Kill                               int           // agents killed after the idle measure
	LeaseTTL                           time.Duration
	// RebalanceDelay is the master's (0: its default, 30s); idle is
	// measured only after it passed, as the master spreads leaderships then.
	RebalanceDelay time.Duration
	// Domains spreads the agents over this many failure domains,
	// round-robin (label zone=zN, the storage cluster's failure_domain);
	// 0: none.
	Domains int
	// KillDomain kills every agent of zone z0 (instead of Kill agents) to
	// time the failover of a whole domain's leaders.
	KillDomain bool
	// Binary is the cairn binary started as the etcd,master,broker process.
	Binary string
	// LogLevel is that process's --log-level ("": error); its log goes to
	// Log, or when that is nil to a file in the run's directory. The agents
	// log nothing.
	LogLevel string
	Log      io.Writer
	// Progress, when set, receives one line per phase.
	Progress io.Writer
	// PlaceProfile, when set, receives a CPU profile of this (the agents')
	// process from the first database's create to every replica placed.
	PlaceProfile io.Writer
}

// Validate names the first impossible parameter.
func (p Params) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("simulate cluster: "+format+": %w", append(args, ErrInvalidParams)...)
	}
	switch {
	case p.Nodes < 1 || p.Nodes > 5000:
		return bad("--nodes %d must be 1 to 5000", p.Nodes)
	case p.Databases < 0 || p.Databases > 10000:
		return bad("--databases %d must be 0 to 10000", p.Databases)
	case p.Shards < 1 || p.Shards > 1024:
		return bad("--shards %d must be 1 to 1024", p.Shards)
	case p.Replicas < 1 || p.Replicas > p.Nodes:
		return bad("--replicas %d must be 1 to --nodes (%d)", p.Replicas, p.Nodes)
	case p.Kill < 0 || p.Kill >= p.Nodes:
		return bad("--kill %d must be 0 to --nodes - 1", p.Kill)
	case p.Idle < 0 || p.Idle > time.Hour:
		return bad("--idle %s must be 0 to 1h", p.Idle)
	case p.LeaseTTL != 0 && p.LeaseTTL < 2*time.Second:
		return bad("--lease-ttl %s must be at least 2s", p.LeaseTTL)
	case p.RebalanceDelay < 0 || p.RebalanceDelay > time.Hour:
		return bad("--rebalance-delay %s must be 0 to 1h", p.RebalanceDelay)
	case p.Domains < 0 || p.Domains > p.Nodes:
		return bad("--domains %d must be 0 to --nodes (%d)", p.Domains, p.Nodes)
	case p.KillDomain && (p.Domains < 2 || p.Replicas < 2):
		return bad("--kill-domain needs --domains and --replicas of 2 or more")
	case p.Binary == "":
		return bad("no cairn binary to run etcd, the master and the broker")
	}
	return nil
}

// Result is the one JSON object `cairn simulate cluster` prints.
type Result struct {
	Nodes                 int     `json:"nodes"`
	Replicas              int     `json:"replicas"`
	PlaceMS               float64 `json:"place_ms"`
	IdleEtcdRevisionsPerS float64 `json:"idle_etcd_revisions_per_s"`
	IdleCPUCores          float64 `json:"idle_cpu_cores"`
	IdleCPUMsPerNodePerS  float64 `json:"idle_cpu_ms_per_node_per_s"`
	// IdleCPUCores, RSSMiB and Goroutines count both processes: the
	// agents' (this one) and the etcd,master,broker child.
	RSSMiB float64 `json:"rss_mib"`
	// Goroutines at the end of the idle measure: a replica waiting for
	// work holds none, so this does not grow with them.
	Goroutines int `json:"goroutines"`
	// FailoverMS is from the killed agents' leases' end to every shard
	// they led online under a live leader in the master's published
	// state; FailoverWritableMS to every such new leader having published
	// its in-sync set at its term (it takes writes from then on).
	FailoverMS         float64 `json:"failover_ms"`
	FailoverWritableMS float64 `json:"failover_writable_ms"`
	FailoverShards     int     `json:"failover_shards"`
	// DomainsPerShard: the fewest and most failure domains a shard's
	// replicas span once placed (with --domains).
	DomainsPerShard *MinMax `json:"domains_per_shard,omitempty"`
}

// cluster is a running simulation.
type cluster struct {
	p  Params
	lg *zap.Logger
	// agentsLog is lg's file, closed once the agents stopped (not when
	// their stop timed out: they may still log as the process exits).
	agentsLog io.Closer
	srv       *server // the etcd,master,broker process
	store     *kv.EtcdStore
	sm        *statemachine.Manager // the agents' shared local state store
	feed      *storage.Feed
	stopFeed  context.CancelFunc
	feedDone  chan struct{}
	keys      models.Keys
	ck        models.ClusterKeys
	api       string
	// apiClient posts the databases: its idle pool keeps a connection per
	// creator, so a create does not open (and leave in TIME_WAIT) a new
	// one, as http.DefaultClient's two idle connections per host made six
	// of every eight do. apiDials counts the connections it opened.
	apiClient *http.Client
	apiDials  atomic.Int64
	etcd      string // the etcd,master,broker process's etcd client URL
	agents    []*agent
	zoneOf    map[string]string // agent id -> its zone (with Domains)
	// stores are the agents' etcd clients, one per agentsPerClient agents:
	// each real node has its own, and one client's single lease keep-alive
	// stream would serialise every agent's renewals.
	stores []*countingStore
	views  []*countingStore // the agents' lease streams on their shared clients
	counts *requestCounts   // the agents' etcd and peer requests, by kind
	loop   *loopback
	client *http.Client // the agents' requests to each other (loopback)
	// calm is when the master may have finished its follow-up work on the
	// membership: every agent registered plus its rebalance delay (it
	// spreads leaderships once membership has been stable that long).
	// members moves it on whenever the live set changes after that (an
	// agent whose lease ran out under load and that registered again): the
	// master's delay starts over then, and its plan would otherwise run
	// inside the idle measure.
	calm    time.Time
	members *membership
	// began and shown time the placement's progress lines.
	began, shown time.Time
}

// Run runs one simulation until it has every figure or ctx ends.
func Run(ctx context.Context, p Params) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = 3 * time.Second
	}
	if p.Progress == nil {
		p.Progress = io.Discard
	}
	gin.SetMode(gin.ReleaseMode)
	dir, err := os.MkdirTemp("", "cairn-simulate-*")
	if err != nil {
		return Result{}, err
	}
	// The agents' warnings and errors (a lease lost, a failover refused)
	// go to a file in the run's directory, kept when the run fails.
	agentsLog, err := os.Create(filepath.Join(dir, "agents.log"))
	if err != nil {
		return Result{}, err
	}
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(agentsLog), zap.WarnLevel))
	c := &cluster{p: p, lg: lg, agentsLog: agentsLog, zoneOf: map[string]string{}}
	res, err := c.run(ctx, dir)
	if err != nil {
		// The run's logs and what was left un-led are what explains a
		// failure: the directory is kept and named.
		err = fmt.Errorf("%w (run directory kept: %s)", err, dir)
		fmt.Fprintf(p.Progress, "run directory kept: %s\n", dir)
		return res, err
	}
	_ = os.RemoveAll(dir)
	return res, nil
}

// run starts the cluster and measures it; on an error it writes what
// explains it into dir before the cluster stops.
func (c *cluster) run(ctx context.Context, dir string) (res Result, err error) {
	defer c.stop() // also after a start that failed half-way
	defer func() {
		if err == nil {
			return
		}
		if n, derr := c.dumpUnled(dir); derr != nil {
			fmt.Fprintf(c.p.Progress, "listing the un-led shards: %v\n", derr)
		} else if n > 0 {
			fmt.Fprintf(c.p.Progress, "%d shards not online under a live leader: %s\n", n, filepath.Join(dir, unledFile))
		}
	}()
	if err := c.start(ctx, dir); err != nil {
		return Result{}, err
	}
	return c.measure(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *cluster) start(ctx context.Context, dir string) error {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	level, format := c.p.LogLevel, "console"
	if level == "" {
		level = "error"
	}
	if c.p.Log == nil {
		format = "json"
	}
	args := []string{"--role", "etcd,master,broker", "--data-dir", filepath.Join(dir, "server"),
		"--http-addr", httpAddr, "--etcd-listen-client-url", clientURL,
		"--etcd-listen-peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		"--lease-ttl", c.p.LeaseTTL.String(), "--log-level", level, "--log-format", format}
	if c.p.RebalanceDelay > 0 {
		args = append(args, "--rebalance-delay", c.p.RebalanceDelay.String())
	}
	// Parsed here too for what the agents share with it (namespace, delay).
	cfg, err := config.Parse(args, func(string) (string, bool) { return "", false }, false, io.Discard)
	if err != nil {
		return err
	}
	if c.srv, err = startServer(ctx, c.p.Binary, dir, httpAddr, args, c.p.Log); err != nil {
		return err
	}
	c.api, c.etcd = c.srv.api, clientURL
	c.apiClient = newAPIClient(&c.apiDials)
	fmt.Fprintf(c.p.Progress, "etcd,master,broker: process %d (%s) at %s (pprof under /debug/pprof/), etcd at %s (its metrics under /metrics); CPU, RSS and goroutines below count it and this process\n",
		c.srv.pid(), c.p.Binary, c.api, clientURL)
	c.keys = models.Keys{NS: cfg.Namespace}
	c.ck = models.ClusterKeys{SNS: c.keys.ClusterNamespace(models.StorageCluster{Name: "default"})}
	c.store, err = kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{clientURL}, Logger: c.lg})
	if err != nil {
		return err
	}
	sc := map[string]any{"name": "default"}
	if c.p.Domains > 0 {
		sc["failure_domain"] = "zone"
	}
	if err := c.post(ctx, "/api/v1/storage-clusters", sc); err != nil {
		return err
	}
	// What a storage-only process watches (app.watched): the live nodes
	// of its cluster, no in-sync sets. Each real node decodes every node
	// record change itself; here one watch feeds every agent, as it does
	// for the other records: the agents find their leaders' addresses and
	// their followers' liveness there, and end their fetch sessions to a
	// node that left, as real nodes do, instead of asking etcd.
	c.sm = statemachine.New(statemachine.Config{Logger: c.lg})
	c.sm.Start(context.Background())
	srcs := append(statemachine.MainSources(c.store, c.keys), statemachine.ClusterSources(c.store, "default", c.ck)...)
	for _, src := range srcs {
		switch src.Kind {
		case statemachine.KindMaster, statemachine.KindStorageConfig, statemachine.KindDatabaseConfig,
			statemachine.KindAssign, statemachine.KindShardState, statemachine.KindStorageNodes:
			c.sm.AddSource(src)
		}
	}
	c.feed = storage.NewFeed(c.sm.Snapshot, c.sm.Changed)
	fctx, stopFeed := context.WithCancel(context.Background())
	c.stopFeed, c.feedDone = stopFeed, make(chan struct{})
	go func() { defer close(c.feedDone); c.feed.Run(fctx) }()
	fmt.Fprintf(c.p.Progress, "starting %d storage agents\n", c.p.Nodes)
	c.counts = &requestCounts{n: map[string]int64{}}
	c.loop = newLoopback(c.counts)
	c.client = &http.Client{Transport: c.loop}
	for range (c.p.Nodes + agentsPerClient - 1) / agentsPerClient {
		s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{clientURL}, Logger: c.lg})
		if err != nil {
			return err
		}
		c.stores = append(c.stores, &countingStore{EtcdStore: s, keys: c.keys, ck: c.ck, c: c.counts})
	}
	for i := range c.p.Nodes {
		// A lease stream per agentsPerStream agents on the shared
		// connection: etcd renews one stream's leases one after the other,
		// each waiting for its read loop when the raft loop is late, and 25
		// agents' renewals queued behind each other on a loaded etcd
		// outlived a 3s TTL. (One stream per agent costs ~0.6 MiB and
		// some idle CPU each.)
		if i%agentsPerStream == 0 {
			shared := c.stores[i/agentsPerClient]
			c.views = append(c.views, &countingStore{EtcdStore: shared.EtcdStore.LeaseStream(), keys: c.keys, ck: c.ck, c: c.counts})
		}
		var labels map[string]string
		id := fmt.Sprintf("s%04d", i)
		if c.p.Domains > 0 {
			labels = map[string]string{"zone": fmt.Sprintf("z%d", i%c.p.Domains)}
			c.zoneOf[id] = labels["zone"]
		}
		a, err := c.startAgent(id, labels, c.views[len(c.views)-1])
		if err != nil {
			return err
		}
		c.agents = append(c.agents, a)
	}
	if err := c.until(ctx, 5*time.Minute, "every agent registered", func() bool {
		return c.sm.Snapshot().Nodes.At("default").Len() == c.p.Nodes
	}); err != nil {
		return err
	}
	if err := c.masterSeesAll(ctx); err != nil {
		return err
	}
	c.calm = time.Now().Add(cfg.RebalanceDelay)
	c.members = watchMembership(c.sm, "default", cfg.RebalanceDelay)
	return nil
}

// agentsStopWait bounds the agents' stop: after a lease storm thousands of
// their requests wait on a loaded etcd, and the etcd,master,broker process
// must not outlive a ctrl-C by minutes (the process exits right after).
const agentsStopWait = 30 * time.Second

func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, a := range c.agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.stop() }()
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(agentsStopWait):
		fmt.Fprintf(c.p.Progress, "agents still stopping after %s; stopping the etcd,master,broker process\n", agentsStopWait)
		if c.srv != nil {
			c.srv.stop()
		}
		return
	}
	if c.members != nil {
		c.members.stop()
	}
	if c.stopFeed != nil {
		c.stopFeed()
		<-c.feedDone
	}
	if c.sm != nil {
		c.sm.Stop()
	}
	for _, s := range c.views {
		_ = s.Close()
	}
	for _, s := range c.stores {
		_ = s.Close()
	}
	if c.store != nil {
		_ = c.store.Close()
	}
	if c.apiClient != nil {
		c.apiClient.CloseIdleConnections()
	}
	if c.srv != nil {
		c.srv.stop()
	}
	_ = c.agentsLog.Close()
}

// until polls cond every 20ms for up to limit.
func (c *cluster) until(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("simulate cluster: %s: not reached after %s", what, limit)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func (c *cluster) post(ctx context.Context, path string, body any) error {
	b, _ := json.Marshal(body)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api+path, bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.apiClient.Do(req)
		why := "error" // what the retry is counted under
		if err == nil {
			why = strconv.Itoa(resp.StatusCode)
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusConflict {
				return nil
			}
			err = fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, msg)
			if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusUnprocessableEntity {
				return err
			}
		}
		if attempt >= 100 {
			return err
		}
		c.counts.add("post_retry_" + why)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// creators are the databases created at once.
const creators = 8

// newAPIClient is the client of the etcd,master,broker process's API,
// counting the connections it opens in dials.
func newAPIClient(dials *atomic.Int64) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// At most one connection per creator, kept: without the cap, a create
	// that started while its creator's last answer was still going back to
	// the idle pool dialed a ninth connection (then kept idle), and the
	// count of connections the creates opened depended on that race.
	t.MaxIdleConnsPerHost, t.MaxConnsPerHost = creators, creators
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: t}
}

// measure creates the databases, then measures the idle cluster and a kill.
func (c *cluster) measure(ctx context.Context) (Result, error) {
	res := Result{Nodes: c.p.Nodes, Replicas: c.p.Databases * c.p.Shards * c.p.Replicas}
	fmt.Fprintf(c.p.Progress, "creating %d databases\n", c.p.Databases)
	start, cpuStart := time.Now(), c.cpuTime()
	c.began, c.shown = start, start
	stopProfile := func() {}
	if c.p.PlaceProfile != nil {
		if err := pprof.StartCPUProfile(c.p.PlaceProfile); err != nil {
			return res, fmt.Errorf("simulate cluster: placement profile: %w", err)
		}
		stopProfile = pprof.StopCPUProfile // a second stop does nothing
		defer stopProfile()                // a placement that fails ends it too
	}
	work := make(chan int)
	errs := make(chan error, creators)
	var took durations // each create's answer time
	var wg sync.WaitGroup
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				began := time.Now()
				err := c.post(ctx, "/api/v1/databases", map[string]any{"name": fmt.Sprintf("db%04d", i),
					"storage_cluster": "default", "num_shards": c.p.Shards, "replica_factor": c.p.Replicas})
				took.add(time.Since(began))
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range c.p.Databases {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return res, err
	default:
	}
	fmt.Fprintf(c.p.Progress, "  %s: %d databases created, %d at a time over %d connections (%s)\n",
		time.Since(start).Round(time.Millisecond), c.p.Databases, creators, c.apiDials.Load(), &took)
	if err := c.until(ctx, 30*time.Minute, "every replica placed and online", func() bool { return c.placed(res.Replicas) }); err != nil {
		return res, err
	}
	res.PlaceMS = float64(time.Since(start).Microseconds()) / 1000
	stopProfile()
	if c.p.Domains > 0 {
		res.DomainsPerShard = domainsPerShard(c.sm.Snapshot(), c.zoneOf)
	}
	// The CPU time the placement took: what a run on a busy machine, which
	// gets less of it per second, still compares with another.
	fmt.Fprintf(c.p.Progress, "placed %d replicas in %.0f ms (%.1f s of CPU, both processes); settling\n  agents' etcd and peer requests: %s\n",
		res.Replicas, res.PlaceMS, (c.cpuTime() - cpuStart).Seconds(), c.counts)

	// Let the in-sync sets, the node records and the master's own follow-up
	// work (spreading leaderships once membership is stable) settle: idle
	// starts once the rebalance delay has passed and etcd's revision stood
	// still for 2 TTLs.
	rev0, settled, err := c.settle(ctx, 2*c.p.LeaseTTL, 10*time.Minute)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(c.p.Progress, "settled after %s (%s); measuring idle for %s\n  agents' etcd and peer requests: %s\n", settled.Round(time.Millisecond), c.members, c.p.Idle, c.counts)
	cpu0, t0 := c.cpuTime(), time.Now()
	wctx, stopWatch := context.WithCancel(ctx)
	changes := c.store.Watch(wctx, c.keys.NS+"/", rev0+1)
	var byPrefix sync.Map // what changed while idle, by key prefix, for the progress lines
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for resp := range changes {
			for _, ev := range resp.Events {
				k := ev.KV.Key
				if i := strings.LastIndexByte(k, '/'); i > 0 {
					k = k[:i]
				}
				n, _ := byPrefix.LoadOrStore(k, new(int))
				*n.(*int)++
			}
		}
	}()
	err = sleep(ctx, c.p.Idle)
	stopWatch()
	<-watched
	if err != nil {
		return res, err
	}
	byPrefix.Range(func(k, v any) bool {
		fmt.Fprintf(c.p.Progress, "idle writes under %s: %d\n", k, *v.(*int))
		return true
	})
	rev1, err := c.revision(ctx)
	if err != nil {
		return res, err
	}
	cpu1, wall := c.cpuTime(), time.Since(t0)
	if wall > 0 && c.p.Idle > 0 {
		res.IdleEtcdRevisionsPerS = round(float64(rev1-rev0) / wall.Seconds())
		cores := (cpu1 - cpu0).Seconds() / wall.Seconds()
		res.IdleCPUCores = round(cores)
		res.IdleCPUMsPerNodePerS = round(cores * 1000 / float64(c.p.Nodes))
	}
	res.RSSMiB = round(rssMiB("self") + rssMiB(strconv.Itoa(c.srv.pid())))
	res.Goroutines = runtime.NumGoroutine() + c.srv.goroutines()
	if c.p.Kill > 0 || c.p.KillDomain {
		f, err := c.kill(ctx)
		if err != nil {
			return res, err
		}
		res.FailoverMS, res.FailoverWritableMS, res.FailoverShards = f.ms, f.writableMS, f.shards
	}
	return res, nil
}

// settle waits until etcd's revision has not moved for quiet (polled every
// quiet/10), at most limit; it returns that revision and how long it took.
func (c *cluster) settle(ctx context.Context, quiet, limit time.Duration) (int64, time.Duration, error) {
	start := time.Now()
	rev, err := c.revision(ctx)
	if err != nil {
		return 0, 0, err
	}
	since := time.Now()
	calm := func() time.Time {
		if c.members == nil {
			return c.calm
		}
		return c.members.calm(c.calm)
	}
	for time.Since(since) < quiet || time.Now().Before(calm().Add(quiet)) {
		if time.Since(start) > limit {
			return 0, 0, fmt.Errorf("simulate cluster: etcd never stood still for %s within %s", quiet, limit)
		}
		if err := sleep(ctx, quiet/10); err != nil {
			return 0, 0, err
		}
		r, err := c.revision(ctx)
		if err != nil {
			return 0, 0, err
		}
		if r != rev {
			rev, since = r, time.Now()
		}
		if time.Since(c.shown) >= 5*time.Second {
			c.shown = time.Now()
			fmt.Fprintf(c.p.Progress, "  settling %s: etcd revision %d\n    agents' etcd and peer requests: %s\n",
				time.Since(start).Round(time.Second), rev, c.counts)
		}
	}
	return rev, time.Since(start), nil
}

// revision is etcd's current revision; a loaded machine may need a retry.
func (c *cluster) revision(ctx context.Context) (int64, error) {
	var err error
	for range 10 {
		var rev int64
		if _, rev, err = c.store.Header(ctx); err == nil {
			return rev, nil
		}
		if err := sleep(ctx, time.Second); err != nil {
			return 0, err
		}
	}
	return 0, err
}

// placed: every shard of every database is online in the master's state and
// the agents host every replica.
func (c *cluster) placed(want int) bool {
	st := c.sm.Snapshot()
	online := 0
	for _, ss := range st.ShardStates.All() {
		for _, s := range ss.Shards {
			if s.Status == models.StatusOnline {
				online++
			}
		}
	}
	n := 0
	for _, a := range c.agents {
		n += a.host.Hosted()
	}
	if time.Since(c.shown) >= 5*time.Second {
		c.shown = time.Now()
		_, rev, _ := c.store.Header(context.Background())
		fmt.Fprintf(c.p.Progress, "  %s: %d databases assigned, %d shards online, %d replicas hosted, etcd revision %d\n    agents' etcd and peer requests: %s\n",
			time.Since(c.began).Round(time.Second), st.Assignments.Len(), online, n, rev, c.counts)
	}
	return online == c.p.Databases*c.p.Shards && n == want
}

// failover is what kill measured.
type failover struct {
	ms, writableMS float64
	shards         int
}

// kill stops the agents that lead the most shards, or every agent of zone
// z0 (as a kill -9 would: no handoff, no answers), and revokes their leases
// all at once (the moment etcd would expire them: a killed domain's leases
// run out together). It then times, from the leases' end (the last killed
// agent's record deleted in etcd), the master until every shard they led
// has a new online leader, and the new leaders until each has published
// its in-sync set at its term (a leader takes writes only from then on).
// The times are taken by an observer in a process of its own: a watch in
// this process, busy with the agents' work, saw etcd's writes seconds late.
func (c *cluster) kill(ctx context.Context) (failover, error) {
	st := c.sm.Snapshot()
	leads := map[string][]string{} // node -> shards led
	for db, ss := range st.ShardStates.All() {
		for _, s := range ss.Shards {
			if s.Status == models.StatusOnline {
				leads[s.Leader] = append(leads[s.Leader], models.ShardID(db, s.ID))
			}
		}
	}
	var victims []*agent
	for i, a := range c.agents {
		if (c.p.KillDomain && i%c.p.Domains == 0) || (!c.p.KillDomain && len(victims) < c.p.Kill && len(leads[a.id]) > 0) {
			victims = append(victims, a)
		}
	}
	w := Watch{Etcd: c.etcd, Nodes: c.ck.NodesPrefix(), States: c.keys.ShardStatePrefix(), ISR: c.ck.ISRPrefix()}
	for _, v := range victims {
		w.Dead = append(w.Dead, v.id)
		w.Shards = append(w.Shards, leads[v.id]...)
	}
	obs, err := startObserver(ctx, c.p.Binary, w)
	if err != nil {
		return failover{}, err
	}
	defer obs.stop()
	fmt.Fprintf(c.p.Progress, "failover observer: process %d, watching %d agents' records and the %d shards they lead\n",
		obs.pid(), len(w.Dead), len(w.Shards))
	f := failover{shards: len(w.Shards)}
	for _, v := range victims {
		v.freeze()
	}
	// When the agents' own state store (whose changes give the new leaders
	// their roles) shows every new leader: its lag is the agents' too.
	agentsSaw := make(chan time.Time, 1)
	sctx, stopSeen := context.WithCancel(ctx)
	seenDone := make(chan struct{})
	defer func() { stopSeen(); <-seenDone }()
	dead := map[string]bool{}
	for _, id := range w.Dead {
		dead[id] = true
	}
	go func() {
		defer close(seenDone)
		if c.agentsSeeAll(sctx, w.Shards, dead) {
			agentsSaw <- time.Now()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for _, v := range victims {
		wg.Add(1)
		go func() { defer wg.Done(); v.revoke() }()
	}
	wg.Wait()
	fmt.Fprintf(c.p.Progress, "killed %d agents leading %d shards; their leases revoked in %s\n",
		len(victims), f.shards, time.Since(start).Round(time.Millisecond))
	left := func(led, isr int) {
		if time.Since(c.shown) >= 5*time.Second {
			c.shown = time.Now()
			fmt.Fprintf(c.p.Progress, "  %s after the kill: %d shards still led by killed agents or offline, %d new leaders without their in-sync set\n",
				time.Since(start).Round(time.Second), led, isr)
		}
	}
	gone, err := obs.next(ctx, lineGone, time.Minute, left)
	if err != nil {
		return f, err
	}
	fmt.Fprintf(c.p.Progress, "the observer saw the last record of a killed agent deleted %s after the kill's start\n",
		gone.Sub(start).Round(time.Millisecond))
	ms := func(t time.Time) float64 { return float64(t.Sub(gone).Microseconds()) / 1000 }
	led, err := obs.next(ctx, lineLed, 5*time.Minute, left)
	if err != nil {
		return f, err
	}
	f.ms = ms(led)
	writable, err := obs.next(ctx, lineWritable, 5*time.Minute, left)
	if err == nil {
		f.writableMS = ms(writable)
	} else {
		writable = time.Time{} // not reached: the run ended first
	}
	// The new leaders took writes once their roles came from it: it shows
	// them by now, or at the look's next poll.
	if err == nil {
		select {
		case t := <-agentsSaw:
			fmt.Fprintf(c.p.Progress, "the agents' state store showed every new leader %.0f ms after the leases' end\n", ms(t))
		case <-time.After(time.Second):
		}
	}
	fmt.Fprintf(c.p.Progress, "%s\n  agents' etcd and peer requests: %s\n",
		failoverLine(gone, led, writable, obs.marks[lineHalf], obs.marks[lineMost]), c.counts)
	return f, err
}

// agentsSeeAll returns true once the agents' state store shows every shard
// of ids (models.ShardID) online under a leader not in dead, false if ctx
// ends first. It looks again at each publication of the store, only at the
// databases whose states changed: polling every shard every 20 ms, it took
// ~6 % of this process's CPU while the failover it times was under way.
func (c *cluster) agentsSeeAll(ctx context.Context, ids []string, dead map[string]bool) bool {
	wait := map[string][]int{} // db -> shard numbers not yet led
	for _, id := range ids {
		if db, shard, err := models.ParseShardID(id); err == nil {
			wait[db] = append(wait[db], shard)
		}
	}
	seen := map[string]models.ShardStates{}
	for len(wait) > 0 {
		changed := c.sm.Changed()
		st := c.sm.Snapshot()
		for db, shards := range wait {
			ss := st.ShardStates.At(db)
			if prev, ok := seen[db]; ok && len(prev.Shards) == len(ss.Shards) && (len(ss.Shards) == 0 || &prev.Shards[0] == &ss.Shards[0]) {
				continue // the same states as last looked at
			}
			seen[db] = ss
			shards = slices.DeleteFunc(shards, func(n int) bool {
				_, ok := newLeader(func(string) models.ShardStates { return ss }, dead, models.ShardID(db, n))
				return ok
			})
			if len(shards) == 0 {
				delete(wait, db)
			} else {
				wait[db] = shards
			}
		}
		if len(wait) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
	return true
}

// failoverLine says when, after the leases' end (gone), the new leaders
// were all in place (led) and took writes: all, half and nine in ten of
// them. A mark the run ended before is "not reached".
func failoverLine(gone, led, writable, half, most time.Time) string {
	after := func(t time.Time) string {
		if t.IsZero() {
			return "not reached"
		}
		return fmt.Sprintf("%.0f ms", float64(t.Sub(gone).Microseconds())/1000)
	}
	return fmt.Sprintf("failover led in %s, taking writes in %s after the leases' end (half the new leaders in %s, 90%% in %s)",
		after(led), after(writable), after(half), after(most))
}

// durations sums and bounds the answer times of requests made in parallel.
type durations struct {
	mu       sync.Mutex
	n        int
	sum, max time.Duration
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	d.sum += x
	d.max = max(d.max, x)
}

// String is the mean and the longest.
func (d *durations) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return "none"
	}
	return fmt.Sprintf("answered in %s on average, %s at most", (d.sum / time.Duration(d.n)).Round(time.Millisecond), d.max.Round(time.Millisecond))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func round(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// cpuTime is the user + system CPU time of this process and of the
// etcd,master,broker process.
func (c *cluster) cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + procCPU(c.srv.pid())
}

// rssMiB is a process's resident set from /proc/<pid>/status (pid "self"
// for this one; 0 where there is none).
func rssMiB(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return round(kb / 1024)
		}
	}
	return 0
}

// agent is one simulated storage node.
type agent struct {
	id      string
	addr    string
	loop    *loopback
	host    *storage.Host
	srv     *http.Server
	cancel  context.CancelFunc // the host
	regStop context.CancelFunc // the registration (revokes the lease)
	done    chan struct{}
	regDone chan struct{}
	once    sync.Once
}

// agentsPerClient is how many agents share one etcd client, and
// agentsPerStream one lease keep-alive stream on it.
const (
	agentsPerClient = 25
	agentsPerStream = 5
)

func (c *cluster) startAgent(id string, labels map[string]string, store *countingStore) (*agent, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	h := storage.NewHost(storage.HostConfig{NodeID: id, Cluster: "default", Engine: newMemEngine(), Store: store, Keys: c.ck,
		State: c.sm.Snapshot, Feed: c.feed, Logger: c.lg, DropDelay: time.Hour, StateStore: store, StateKeys: c.keys, Client: c.client})
	r := gin.New()
	h.Routes(r)
	a := &agent{id: id, addr: addr, loop: c.loop, host: h, srv: &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}), regDone: make(chan struct{})}
	c.loop.serve(addr, r)
	go func() { _ = a.srv.Serve(l) }()
	hctx, cancel := context.WithCancel(context.Background())
	rctx, regStop := context.WithCancel(context.Background())
	a.cancel, a.regStop = cancel, regStop
	var started sync.Once
	go func() {
		defer close(a.regDone)
		err := storage.RunNode(rctx, storage.NodeConfig{Store: store, Keys: c.ck, NodeID: id, Address: addr, Cluster: "default",
			Labels: labels, TTL: c.p.LeaseTTL, Report: h.Following, ReportVersion: h.FollowingVersion, Logger: c.lg, Held: h.SetRecordRev,
			Registered: func() { started.Do(func() { go func() { defer close(a.done); h.Run(hctx) }() }) }})
		if err != nil {
			c.lg.Error("agent registration failed", zap.String("node_id", id), zap.Error(err))
		}
		started.Do(func() { close(a.done) })
	}()
	return a, nil
}

// freeze stops the agent serving: its host and HTTP server end, as a killed
// process's would.
func (a *agent) freeze() {
	a.once.Do(func() {
		a.loop.close(a.addr)
		_ = a.srv.Close()
		a.cancel()
	})
}

// revoke ends the registration, revoking its lease.
func (a *agent) revoke() {
	a.regStop()
	<-a.regDone
}

func (a *agent) stop() {
	a.freeze()
	a.revoke()
	<-a.done
}
