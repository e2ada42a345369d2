// Command cairn runs a Cairn node (any mix of the etcd, master, broker and
// storage roles; standalone runs all four) and its operator tools: backup,
// restore, simulate and version. Run `cairn --help` for the flags.
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
	"syscall"
	"time"

	"github.com/cairn-db/cairn/app"
	"github.com/cairn-db/cairn/backup"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/simcluster"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runNode(args, stderr)
	case "backup", "restore":
		return backup.Main(cmd, args, stdout, stderr)
	case "simulate":
		return simulate(args, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "cairn %s\n", version)
		return 0
	case "help":
		config.Usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "cairn: unknown command %q: want run, backup, restore, simulate or version (see cairn --help)\n", cmd)
	return 2
}

func runNode(args []string, stderr io.Writer) int {
	fi, _ := os.Stderr.Stat()
	isTTY := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	cfg, err := config.Parse(args, os.LookupEnv, isTTY, stderr)
	if errors.Is(err, config.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		var ue *config.UsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	lg, err := config.NewLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		return 2
	}
	defer func() { _ = lg.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := app.Start(cfg, lg)
	if err != nil {
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		var ue *config.UsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
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
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var p placement.SimulateParams
	fs.IntVar(&p.Nodes, "nodes", 10, "storage nodes before the change")
	fs.IntVar(&p.Shards, "shards", 100, "shards (all databases together)")
	fs.IntVar(&p.Replicas, "replicas", 3, "replicas per shard")
	fs.IntVar(&p.AddNodes, "add-nodes", 1, "nodes added")
	fs.IntVar(&p.RemoveNodes, "remove-nodes", 0, "nodes removed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cairn simulate [--nodes N --shards P --replicas R --add-nodes K --remove-nodes K]")
		fmt.Fprintln(stderr, "Places P shards x R replicas on N nodes, applies the change and prints the re-plan as JSON.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cairn simulate: unexpected argument %q\n", fs.Arg(0))
		return 2
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
	verbose := fs.Bool("v", false, "print progress to stderr")
	logLevel := fs.String("log-level", "", "log the master's and broker's work to stderr at this level (debug, info, warn, error)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cairn simulate cluster --nodes N --databases D --shards P --replicas R [--idle DUR --kill K]")
		fmt.Fprintln(stderr, "Runs an embedded etcd, the master, a broker and N in-process storage agents, and prints one JSON object:")
		fmt.Fprintln(stderr, `{"nodes","replicas","place_ms","idle_etcd_revisions_per_s","idle_cpu_cores","idle_cpu_ms_per_node_per_s","rss_mib","failover_ms","failover_shards"}`)
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
		lg, err := config.NewLogger(*logLevel, "console")
		if err != nil {
			fmt.Fprintf(stderr, "cairn simulate cluster: --log-level: %v\n", err)
			return 2
		}
		p.Logger = lg
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "cairn %v\n", err)
		return 2
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
