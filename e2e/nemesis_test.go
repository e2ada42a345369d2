package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The nemesis's defaults: `make test` runs this short fixed-seed run;
// `make nemesis SEED=.. DURATION=..` sets the env vars for a long one.
const (
	nemDefaultDuration = 60 * time.Second
	nemDefaultSeed     = 1
	nemStorageNodes    = 4
	nemShards          = 8
	nemRF              = 3
	nemTTL             = 2 * time.Second
	nemRebalanceDelay  = 5 * time.Second
	nemDB              = "nem"
)

// nemCluster is the nemesis's topology: m0 runs etcd, master and broker; m1
// master and broker; storage nodes in cluster "default". procs lists the
// storage nodes, then m0 and m1: schedule targets index it.
type nemCluster struct {
	t        *testing.T
	begin    time.Time
	dir      string
	endpoint string
	ttl      time.Duration
	m0, m1   *Proc
	storage  []*Proc
	procs    []*Proc
	ids      map[*Proc]string
	frozen   map[*Proc]bool
	backups  []string
	restores int
	// takeovers counts copy-datadir steps where the original had lost its
	// lease first, so the copy held the id until the nemesis stopped it.
	takeovers int

	// Findings of the fault steps, reported as failed checks at the end.
	dupFindings, restoreFindings, termFindings []string
}

func (c *nemCluster) logf(format string, a ...any) {
	c.t.Logf("[nemesis +%6.1fs] %s", time.Since(c.begin).Seconds(), fmt.Sprintf(format, a...))
}

func (c *nemCluster) finding(list *[]string, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	c.logf("FINDING: %s", msg)
	*list = append(*list, msg)
}

func (c *nemCluster) label(p *Proc) string {
	if id, ok := c.ids[p]; ok {
		return fmt.Sprintf("%s (%s)", p.name, id)
	}
	return p.name
}

func (c *nemCluster) idOf(p *Proc) string { return c.ids[p] }

// nemesisEnv reads the run's duration and seed from the environment.
func nemesisEnv(t *testing.T) (time.Duration, uint64) {
	duration, seed := nemDefaultDuration, uint64(nemDefaultSeed)
	if v := os.Getenv("CAIRN_NEMESIS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("invalid CAIRN_NEMESIS_DURATION %q: want a Go duration of at least 10s, e.g. 10m", v)
		}
		duration = d
	}
	if v := os.Getenv("CAIRN_NEMESIS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("invalid CAIRN_NEMESIS_SEED %q: want a whole number", v)
		}
		seed = s
	}
	return duration, seed
}

// startNemCluster starts the processes, the shard-state history recorder
// (before anything is published), and database nem, and waits until every
// shard is online with all replicas in sync.
func startNemCluster(t *testing.T) (*nemCluster, *leaderHistory) {
	c := &nemCluster{t: t, begin: time.Now(), dir: t.TempDir(), endpoint: freeURL(t), ttl: nemTTL,
		ids: map[*Proc]string{}, frozen: map[*Proc]bool{}}
	common := []string{"--lease-ttl", nemTTL.String(), "--rebalance-delay", nemRebalanceDelay.String(), "--log-format", "json"}
	c.m0 = start(t, append([]string{"--role", "etcd,master,broker", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", c.endpoint, "--etcd-listen-peer-url", freeURL(t)}, common...)...)
	hist := startLeaderHistory(c.endpoint, "/cairn/state/shards/")
	t.Cleanup(hist.stop)
	c.m1 = start(t, append([]string{"--role", "master,broker", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-endpoints", c.endpoint}, common...)...)
	c.ids[c.m0], c.ids[c.m1] = nodeID(t, c.m0), nodeID(t, c.m1)
	require.Eventually(t, func() bool {
		code, _ := c.m0.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
		return code == 201 || code == 409
	}, 20*time.Second, 50*time.Millisecond, "storage cluster never created")
	for range nemStorageNodes {
		s := start(t, append([]string{"--role", "storage", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--etcd-endpoints", c.endpoint}, common...)...)
		c.storage = append(c.storage, s)
	}
	for _, s := range c.storage {
		c.ids[s] = nodeID(t, s)
	}
	c.procs = append(append([]*Proc{}, c.storage...), c.m0, c.m1)
	require.Eventually(t, func() bool { return len(c.liveStorage()) == nemStorageNodes },
		20*time.Second, 20*time.Millisecond, "storage nodes never all live")
	require.Eventually(t, func() bool {
		code, _ := c.m0.post("/api/v1/databases", map[string]any{"name": nemDB, "num_shards": nemShards, "replica_factor": nemRF})
		return code == 201
	}, 20*time.Second, 100*time.Millisecond, "database never created")
	c.data().waitHealthy(60 * time.Second)
	return c, hist
}

// data is the dataCluster view of the nemesis database through broker m0.
func (c *nemCluster) data() *dataCluster {
	return &dataCluster{t: c.t, broker: c.m0, db: nemDB, rf: nemRF, shards: nemShards}
}

// liveStorage is the storage node ids the broker m0 lists as live.
func (c *nemCluster) liveStorage() []string {
	var nodes struct {
		Storage map[string][]struct {
			NodeID string `json:"node_id"`
		} `json:"storage"`
	}
	if getDataJSON(c.m0, "/api/v1/nodes", &nodes) != 200 {
		return nil
	}
	var out []string
	for _, n := range nodes.Storage["default"] {
		out = append(out, n.NodeID)
	}
	return out
}

// TestNemesis: writers send uniquely numbered batches through both brokers
// while a seeded schedule kills (-9), freezes past the lease TTL and
// restarts storage nodes and masters, restores an earlier backup into a
// wiped etcd and starts a copy of a live node's data dir. Then it heals
// everything and checks: every shard online with all replicas in sync and
// writable, every acknowledged point present exactly once, no shard term with
// two leaders in the etcd history, leaders balanced (max - min <= 1). It
// reports availability (the fraction of seconds with an acknowledged write)
// and the longest write gap. CAIRN_NEMESIS_DURATION and CAIRN_NEMESIS_SEED
// choose the run (make nemesis).
func TestNemesis(t *testing.T) {
	duration, seed := nemesisEnv(t)
	c, hist := startNemCluster(t)
	steps := nemSchedule(seed, duration, nemTTL, nemStorageNodes)
	names := make([]string, len(c.procs))
	for i, p := range c.procs {
		names[i] = fmt.Sprintf("%d=%s", i, c.label(p))
	}
	c.logf("seed %d, duration %s; targets %s", seed, duration, strings.Join(names, ", "))
	for i, s := range steps {
		c.logf("schedule %2d: %s", i, s)
	}
	c.backup()
	require.NotEmpty(t, c.backups, "the first backup failed")

	writers := []*nemWriter{
		startNemWriter("via "+c.m0.name, c.m0.addr, nemDB, 0),
		startNemWriter("via "+c.m1.name, c.m1.addr, nemDB, 1),
	}
	for _, w := range writers {
		t.Cleanup(w.stop)
	}
	from := time.Now()
	deadline := from.Add(duration)
	ran := map[string]int{}
	for i, s := range steps {
		// Past the deadline only the guaranteed rare faults still run.
		rare := s.kind == faultRestore || s.kind == faultDupDir
		if time.Now().After(deadline) && (!rare || ran[s.kind] > 0) {
			continue
		}
		target := "-"
		if s.target >= 0 {
			target = c.label(c.procs[s.target])
		}
		c.logf("step %2d: %s on %s for %s", i, s.kind, target, s.hold.Round(time.Millisecond))
		c.apply(s)
		ran[s.kind]++
	}
	to := time.Now()
	for _, w := range writers {
		w.stop()
	}
	c.logf("faults over after %s: %v; copy-datadir steps where the copy took the id over (original's lease expired first): %d",
		to.Sub(from).Round(time.Second), ran, c.takeovers)

	c.heal(t)
	c.checkAll(t, hist, writers, from, to)
}

// checkAll runs every end-of-run check; each failure is reported on its own
// (t.Errorf) so one run shows all that is wrong.
func (c *nemCluster) checkAll(t *testing.T, hist *leaderHistory, writers []*nemWriter, from, to time.Time) {
	// Figures first: they matter even when a check fails.
	var all []nemBatch
	for _, w := range writers {
		acked, sent, _ := w.result()
		all = append(all, acked...)
		av, gap := availability(acked, from, to)
		c.logf("writer %s: %d of %d batches acknowledged; availability %.3f, longest write gap %s; failures:%s",
			w.name, len(acked), sent, av, gap.Round(time.Millisecond), w.failureSummary())
	}
	c.logf("%s", ackTimeline(all, from, to))
	av, gap := availability(all, from, to)
	c.logf("NEMESIS RESULT: availability %.3f (fraction of seconds with an acknowledged write through either broker), longest write gap %s, over %s",
		av, gap.Round(time.Millisecond), to.Sub(from).Round(time.Second))

	dc := c.data()
	// 1. Every storage node back and every shard online with all replicas in sync.
	healed := func() bool { return len(c.liveStorage()) == nemStorageNodes && dc.healthy() }
	if !eventually(healed, 2*time.Minute, 100*time.Millisecond) {
		live := c.liveStorage()
		var offline, short []string
		for _, s := range dc.shardsOf() {
			if s.Status != "online" || s.Leader == "" {
				offline = append(offline, fmt.Sprintf("shard %d (status %q, leader %q, term %d)", s.ID, s.Status, s.Leader, s.Term))
			} else if len(s.ISR) != len(s.Replicas) || len(s.Replicas) != nemRF {
				short = append(short, fmt.Sprintf("shard %d (replicas %v, in sync %v)", s.ID, s.Replicas, s.ISR))
			}
		}
		t.Errorf("CHECK all shards online, in sync: FAILED 2m after healing: %d of %d storage nodes live %v; not online: %v; not fully in sync: %v",
			len(live), nemStorageNodes, live, offline, short)
	} else {
		c.logf("check: all %d shards online with %d in-sync replicas", nemShards, nemRF)
	}

	// 2. Every shard writable through both brokers.
	c.checkWritable(t)

	// 3. Every acknowledged point present exactly once.
	c.checkPoints(t, writers)

	// 4. No shard term with two leaders in the etcd history.
	values, terms, gaps, errs := hist.summary()
	if d := hist.doubleLeaders(); len(d) > 0 {
		t.Errorf("CHECK one leader per shard term: FAILED for %d shard terms (etcd history, %d shard-state values, %d shard terms):\n  %s",
			len(d), values, terms, strings.Join(d, "\n  "))
	} else {
		c.logf("check: one leader per shard term (%d shard-state values, %d shard terms read from etcd)", values, terms)
	}
	if values == 0 {
		t.Errorf("CHECK one leader per shard term: the etcd history recorder read no shard state at all")
	}
	if len(gaps) > 0 || len(errs) > 0 {
		t.Errorf("CHECK one leader per shard term: history incomplete: gaps %v; undecodable values %v", gaps, errs)
	}

	// 5. Leaders balanced once membership is stable.
	var counts map[string]int
	balanced := func() bool {
		counts = map[string]int{}
		for _, id := range c.liveStorage() {
			counts[id] = 0
		}
		for _, s := range dc.shardsOf() {
			if s.Leader != "" {
				counts[s.Leader]++
			}
		}
		lo, hi := minMax(counts)
		return len(counts) == nemStorageNodes && hi-lo <= 1
	}
	within := nemRebalanceDelay + time.Minute
	if !eventually(balanced, within, 200*time.Millisecond) {
		lo, hi := minMax(counts)
		t.Errorf("CHECK leaders balanced: FAILED %s after healing (rebalance delay %s): leaders per node %v, max - min = %d, want <= 1",
			within, nemRebalanceDelay, counts, hi-lo)
	} else {
		c.logf("check: leaders balanced %v", counts)
	}

	// 6. What the fault steps found.
	if len(c.dupFindings) > 0 {
		t.Errorf("CHECK a copy of a live node's data dir refuses to start: FAILED:\n  %s", strings.Join(c.dupFindings, "\n  "))
	}
	if len(c.restoreFindings) > 0 {
		t.Errorf("CHECK restore of an earlier backup: FAILED:\n  %s", strings.Join(c.restoreFindings, "\n  "))
	}
	if len(c.termFindings) > 0 {
		t.Errorf("CHECK SIGTERM stops cleanly: FAILED:\n  %s", strings.Join(c.termFindings, "\n  "))
	}
}

// eventually polls cond until it holds or within passes; unlike
// require.Eventually it lets the caller word the failure.
func eventually(cond func() bool, within, every time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		holdFor(every)
	}
}

func minMax(m map[string]int) (lo, hi int) {
	first := true
	for _, n := range m {
		if first || n < lo {
			lo = n
		}
		if first || n > hi {
			hi = n
		}
		first = false
	}
	return lo, hi
}
