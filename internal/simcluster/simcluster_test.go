package simcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/simcluster"
	"github.com/stretchr/testify/require"
)

// cairnBin is the cairn binary, built once by TestMain: the simulation runs
// etcd, the master and the broker in it, a process of their own.
var cairnBin string

func TestMain(m *testing.M) { os.Exit(withCairn(m)) }

// withCairn builds cairnBin into a temporary directory, runs the tests and
// removes the directory.
func withCairn(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cairn-simcluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "simcluster:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cairnBin = filepath.Join(dir, "cairn")
	if out, err := exec.Command("go", "build", "-o", cairnBin, "github.com/cairn-db/cairn/cmd/cairn").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "simcluster: building cairn: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// A small simulated cluster through the real path: every replica is placed
// and hosted, nothing is written to etcd while idle, and the shards led by
// the killed agent get new leaders.
// etcd, the master and the broker run in a process of their own, stopped when
// the run ends.
func TestSimulateSmallCluster(t *testing.T) {
	var progress lines
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 4, Databases: 2, Shards: 4, Replicas: 3,
		Idle: 2 * time.Second, Kill: 1, RebalanceDelay: time.Second, Binary: cairnBin, Progress: &progress})
	require.NoError(t, err)
	pid := progress.serverPID(t)
	require.NotEqual(t, os.Getpid(), pid)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the etcd,master,broker process %d is gone", pid)
	require.Equal(t, 4, res.Nodes)
	require.Equal(t, 24, res.Replicas)
	require.Positive(t, res.PlaceMS)
	require.Less(t, res.IdleEtcdRevisionsPerS, 1.0, "an idle cluster writes nothing to etcd")
	require.Positive(t, res.FailoverShards, "the killed agent led shards")
	require.Positive(t, res.FailoverMS)
	require.Positive(t, res.RSSMiB)
}

// The databases are created over one kept connection per creator: a
// create that opened a new one (http.DefaultClient keeps two idle per host)
// timed the dial too, on a loaded machine.
func TestSimulateCreatesOverKeptConnections(t *testing.T) {
	var progress lines
	var profile bytes.Buffer
	_, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 3, Databases: 40, Shards: 1, Replicas: 1,
		Idle: time.Second, RebalanceDelay: time.Second, Binary: cairnBin, Progress: &progress, PlaceProfile: &profile})
	require.NoError(t, err)
	// --place-cpu-profile: the profile is written (pprof's gzip-compressed
	// protobuf) once every replica is placed.
	require.Greater(t, profile.Len(), 2, "a placement CPU profile was written")
	require.Equal(t, []byte{0x1f, 0x8b}, profile.Bytes()[:2], "the profile is gzip-compressed, as pprof writes it")
	m := regexp.MustCompile(`40 databases created, 8 at a time over (\d+) connections`).FindStringSubmatch(progress.String())
	require.NotNil(t, m, progress.String())
	dials, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.LessOrEqual(t, dials, 8, "connections opened to create 40 databases 8 at a time")
}

// A run ended from outside (ctrl-C) while its agents start stops the
// etcd,master,broker process too.
func TestSimulateCancelledStopsTheServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := lines{onLine: func(l string) {
		if strings.HasPrefix(l, "starting ") {
			cancel()
		}
	}}
	_, err := simcluster.Run(ctx, simcluster.Params{Nodes: 3, Databases: 1, Shards: 1, Replicas: 1, Binary: cairnBin, Progress: &progress})
	require.ErrorIs(t, err, context.Canceled)
	pid := progress.serverPID(t)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the etcd,master,broker process %d is gone", pid)
	// What it left un-led is listed (nothing was placed yet).
	m := regexp.MustCompile(`run directory kept: (\S+)\)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "the error names the kept run directory: %v", err)
	t.Cleanup(func() { _ = os.RemoveAll(m[1]) })
	unled, rerr := os.ReadFile(filepath.Join(m[1], "unled.txt"))
	require.NoError(t, rerr)
	require.True(t, strings.HasPrefix(string(unled), "0 shards not online under a live leader"), "%s", unled)
}

// A binary that is not cairn fails the run with its exit, at once. A run
// that fails keeps its directory (the server's and the agents' logs) and
// names it.
func TestSimulateServerThatExits(t *testing.T) {
	var progress lines
	_, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 3, Databases: 1, Shards: 1, Replicas: 1, Binary: "/bin/false", Progress: &progress})
	require.ErrorContains(t, err, "exited before it was ready")
	m := regexp.MustCompile(`run directory kept: (\S+)\)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "the error names the kept run directory: %v", err)
	t.Cleanup(func() { _ = os.RemoveAll(m[1]) })
	require.Contains(t, progress.String(), "run directory kept: "+m[1])
	for _, f := range []string{"server.log", "agents.log"} {
		require.FileExists(t, filepath.Join(m[1], f))
	}
}

// lines collects progress lines; onLine sees each as it is written.
type lines struct {
	mu     sync.Mutex
	b      strings.Builder
	onLine func(string)
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	if l.onLine != nil {
		for _, x := range strings.Split(string(p), "\n") {
			l.onLine(x)
		}
	}
	return len(p), nil
}

// serverPID is the etcd,master,broker process's id named by the progress.
func (l *lines) serverPID(t *testing.T) int { return l.pid(t, `etcd,master,broker: process (\d+) `) }

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pid is the process id the progress names where re's group is.
func (l *lines) pid(t *testing.T, re string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := regexp.MustCompile(re).FindStringSubmatch(l.b.String())
	require.NotNil(t, m, "progress names the server process: %s", l.b.String())
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return pid
}

func TestSimulateRefusesBadParams(t *testing.T) {
	for _, p := range []simcluster.Params{
		{Nodes: 0, Shards: 1, Replicas: 1, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 4, Binary: cairnBin},
		{Nodes: 3, Shards: 0, Replicas: 1, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 1, Kill: 3, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 1, LeaseTTL: time.Second, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 1},
	} {
		_, err := simcluster.Run(context.Background(), p)
		require.ErrorIs(t, err, simcluster.ErrInvalidParams, "%+v", p)
	}
}

// Replicas waiting for work hold no goroutine: a follower parked in its
// leader's fetch session is a member of the session, a leader between two
// in-sync upkeeps is a timer. With a goroutine per replica the idle process
// held more goroutines than replicas (plus etcd's, the master's, the
// sessions'); at 1,000 nodes their stacks were most of the memory.
func TestIdleReplicasHoldNoGoroutine(t *testing.T) {
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 8, Databases: 24, Shards: 16, Replicas: 3,
		Idle: time.Second, RebalanceDelay: time.Second, Binary: cairnBin})
	require.NoError(t, err)
	require.Equal(t, 1152, res.Replicas)
	require.Less(t, res.Goroutines, res.Replicas/2, "goroutines at idle, with %d replicas hosted", res.Replicas)
}

// With --domains, the agents carry zone labels, the cluster places across
// them, and every shard of RF 2 spans both zones (5 agents: z0 has 3); with
// --kill-domain all of z0 dies and every shard it led is led from z1.
//
// The failover is timed by an observer in a process of its own (not the
// agents' busy one), from the leases' end, and that process is gone after.
func TestSimulateDomains(t *testing.T) {
	var progress lines
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 5, Databases: 3, Shards: 8, Replicas: 2,
		Domains: 2, KillDomain: true, Idle: time.Second, RebalanceDelay: time.Second, Binary: cairnBin, Progress: &progress})
	require.NoError(t, err)
	pid := progress.pid(t, `failover observer: process (\d+),`)
	require.NotEqual(t, os.Getpid(), pid)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the observer process %d is gone", pid)
	require.Contains(t, progress.String(), "after the leases' end")
	require.Contains(t, progress.String(), "the agents' state store showed every new leader", "the agents' own lag is shown")
	require.Equal(t, &simcluster.MinMax{Min: 2, Max: 2}, res.DomainsPerShard)
	require.Positive(t, res.FailoverShards, "zone z0 led shards")
	require.Positive(t, res.FailoverMS)
	// The new leaders take writes once their in-sync sets are published
	// at their terms, after the master published them.
	require.GreaterOrEqual(t, res.FailoverWritableMS, res.FailoverMS)
	for _, p := range []simcluster.Params{
		{Nodes: 3, Shards: 1, Replicas: 1, Domains: 4, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 2, KillDomain: true, Binary: cairnBin},
		{Nodes: 3, Shards: 1, Replicas: 1, Domains: 2, KillDomain: true, Binary: cairnBin},
	} {
		_, err = simcluster.Run(context.Background(), p)
		require.ErrorIs(t, err, simcluster.ErrInvalidParams, "%+v", p)
	}
}
