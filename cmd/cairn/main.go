// Command cairn runs a Cairn node (any mix of the etcd, master, broker and
// storage roles; standalone runs all four) and its operator tools: backup,
// restore, etcd-auth-setup, simulate, bench write, config init, health and version. Run `cairn --help` for
// the flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/app"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/internal/backup"
	"github.com/cairn-db/cairn/internal/simcluster"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	} else if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		cmd, args = "version", nil
	}
	switch cmd {
	case "run":
		return runNode(args, stdout, stderr)
	case "backup", "restore":
		return backup.Main(cmd, args, stdout, stderr)
	case "etcd-auth-setup":
		return etcdAuthSetup(args, os.LookupEnv, stdout, stderr)
	case "simulate":
		return simulate(args, stdout, stderr)
	case "config":
		return configCmd(args, stdout, stderr)
	case "health":
		return health(args, stdout, stderr)
	case "bench":
		return bench(args, stdout, stderr)
	case "version":
		return versionCmd(args, stdout, stderr)
	case "help":
		config.Usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "cairn: unknown command %q: want run, backup, restore, etcd-auth-setup, simulate, bench, config, health, version or help (see cairn --help)\n", cmd)
	return 2
}

// versionString is the release version, or for a development build the
// commit it was built from when Go recorded it.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "-" + s.Value[:12]
			}
		}
	}
	return v
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version")
	if code, done := parse(fs, args, stdout, stderr, "cairn version", "Prints the version of this binary (the same as cairn --version)."); done {
		return code
	}
	fmt.Fprintf(stdout, "cairn %s\n", versionString())
	return 0
}

// newFlagSet makes a subcommand's flag set; parse does its help and errors.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses a subcommand's flags. --help writes the help in the main
// help's style to stdout (exit 0); a bad flag or a stray argument is named
// on stderr (exit 2). done says the command must return code now.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, synopsis, about string, env ...string) (code int, done bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		config.CommandUsage(stdout, fs, synopsis, about, env...)
		return 0, true
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn %s: %v (see cairn %s --help)\n", fs.Name(), err, fs.Name())
		return 2, true
	}
	return 0, false
}

// startErr says why a node did not start: exit 2 for a usage error (a flag
// or setting that is wrong), 1 otherwise.
func startErr(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "cairn: %v\n", err)
	var ue *config.UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func runNode(args []string, stdout, stderr io.Writer) int {
	fi, _ := os.Stderr.Stat()
	isTTY := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	cfg, err := config.Parse(args, os.LookupEnv, isTTY, stdout)
	if errors.Is(err, config.ErrHelp) {
		return 0
	}
	if err != nil {
		return startErr(stderr, err)
	}
	lg, err := config.NewLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		return 2
	}
	defer func() { _ = lg.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg.Version = version
	// Process-wide, so set by the binary only (tests and simulations
	// embedding several nodes keep the runtime's setting).
	derivedLimit := app.ApplyMemoryLimit(cfg, lg)
	a, err := app.Start(cfg, lg)
	if err != nil {
		return startErr(stderr, err)
	}
	if derivedLimit {
		a.GovernMemoryLimit()
	}
	err = a.Wait(ctx)
	a.Stop()
	if err != nil {
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		return 1
	}
	return 0
}

func simulate(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "cluster" {
		return simulateCluster(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "observe" {
		return simulateObserve(args[1:], stdout, stderr)
	}
	fs := newFlagSet("simulate")
	var p placement.SimulateParams
	fs.IntVar(&p.Nodes, "nodes", 10, "storage nodes before the change")
	fs.IntVar(&p.Shards, "shards", 100, "shards (all databases together)")
	fs.IntVar(&p.Replicas, "replicas", 3, "replicas per shard")
	fs.IntVar(&p.AddNodes, "add-nodes", 1, "nodes added")
	fs.IntVar(&p.RemoveNodes, "remove-nodes", 0, "nodes removed")
	fs.IntVar(&p.Domains, "domains", 0, "failure domains the nodes are spread over, round-robin (0: none)")
	fs.StringVar(&p.Policy, "policy", placement.Policies[0], "placement policy: "+strings.Join(placement.Policies, ", "))
	if code, done := parse(fs, args, stdout, stderr,
		"cairn simulate [--nodes N --shards P --replicas R --add-nodes K --remove-nodes K --domains D --policy P]",
		`Placement what-if: places P shards x R replicas on N nodes, applies the change
(nodes added or removed) and prints the re-plan as one JSON object:
{"policy","moves","lower_bound","replicas_per_node":{"min","max"},"leaders_per_node":{"min","max"},
 "domains_per_shard":{"min","max"},"plan_ms"}.`); done {
		return code
	}
	res, err := placement.Simulate(p)
	if err != nil {
		fmt.Fprintf(stderr, "cairn simulate: %v\n", err)
		if errors.Is(err, placement.ErrInvalidParams) {
			return 2
		}
		return 1
	}
	out, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(out))
	return 0
}

// simulateObserve is the failover observer that `simulate cluster` runs in
// a process of its own: what it watches comes on stdin, its lines go to
// stdout (see simcluster.Observe).
func simulateObserve(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "cairn simulate observe: unexpected argument %q (it is run by simulate cluster)\n", args[0])
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := simcluster.Observe(ctx, os.Stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "cairn simulate observe: %v\n", err)
		return 1
	}
	return 0
}

func simulateCluster(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var p simcluster.Params
	fs.IntVar(&p.Nodes, "nodes", 100, "storage agents")
	fs.IntVar(&p.Databases, "databases", 100, "databases created")
	fs.IntVar(&p.Shards, "shards", 32, "shards per database")
	fs.IntVar(&p.Replicas, "replicas", 3, "replicas per shard")
	fs.DurationVar(&p.Idle, "idle", 30*time.Second, "how long the idle cluster is measured")
	fs.IntVar(&p.Kill, "kill", 1, "agents killed (those leading shards) to time the failover")
	fs.DurationVar(&p.LeaseTTL, "lease-ttl", 3*time.Second, "the agents' and the master's lease TTL")
	fs.DurationVar(&p.RebalanceDelay, "rebalance-delay", 30*time.Second, "the master's rebalance delay; idle is measured after it (leaderships are spread then)")
	fs.IntVar(&p.Domains, "domains", 0, "failure domains the agents are spread over, round-robin (label zone, the cluster's failure_domain; 0: none)")
	fs.BoolVar(&p.KillDomain, "kill-domain", false, "kill every agent of the first domain (instead of --kill) to time the failover of a whole domain's leaders")
	verbose := fs.Bool("v", false, "print progress to stderr")
	logLevel := fs.String("log-level", "", "log the master's and broker's work to stderr at this level (debug, info, warn, error)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the agents' process for the whole run to this file (go tool pprof reads it; the etcd,master,broker process serves /debug/pprof/)")
	placeProfile := fs.String("place-cpu-profile", "", "write a CPU profile of the agents' process from the first create to every replica placed to this file (not with --cpu-profile)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cairn simulate cluster --nodes N --databases D --shards P --replicas R [--idle DUR --kill K --domains D --kill-domain]")
		fmt.Fprintln(stderr, "Runs etcd, the master and a broker (this binary, in a child process) and N in-process storage agents, and prints one JSON object")
		fmt.Fprintln(stderr, "(idle_cpu_cores, rss_mib and goroutines count both processes). A run that fails keeps its directory and names it:")
		fmt.Fprintln(stderr, "server.log (the etcd,master,broker process), agents.log (the agents' warnings), unled.txt (shards not online under a live leader, with their in-sync sets).")
		fmt.Fprintln(stderr, `{"nodes","replicas","place_ms","idle_etcd_revisions_per_s","idle_cpu_cores","idle_cpu_ms_per_node_per_s","rss_mib","goroutines","failover_ms","failover_writable_ms","failover_shards","domains_per_shard"} (domains_per_shard with --domains)`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cairn simulate cluster: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *verbose {
		p.Progress = stderr
	}
	if *logLevel != "" {
		if _, err := config.NewLogger(*logLevel, "console"); err != nil {
			fmt.Fprintf(stderr, "cairn simulate cluster: --log-level: %v\n", err)
			return 2
		}
		p.LogLevel, p.Log = *logLevel, stderr
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "cairn simulate cluster: finding this binary to run etcd, the master and the broker: %v\n", err)
		return 1
	}
	p.Binary = bin
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "cairn %v\n", err)
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "cairn simulate cluster: --cpu-profile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "cairn simulate cluster: --cpu-profile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *placeProfile != "" {
		if *cpuProfile != "" {
			fmt.Fprintln(stderr, "cairn simulate cluster: --place-cpu-profile and --cpu-profile: one profile at a time")
			return 2
		}
		f, err := os.Create(*placeProfile)
		if err != nil {
			fmt.Fprintf(stderr, "cairn simulate cluster: --place-cpu-profile: %v\n", err)
			return 2
		}
		defer f.Close()
		p.PlaceProfile = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := simcluster.Run(ctx, p)
	if err != nil {
		fmt.Fprintf(stderr, "cairn simulate cluster: %v\n", err)
		return 1
	}
	out, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(out))
	return 0
}
