package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cairn-db/cairn/config"
)

// configCmd runs `cairn config init`: the example config file, written to
// --out (default ./cairn.toml; - for stdout), never over an existing file
// unless --force.
func configCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "init" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "-help") {
			fmt.Fprint(stdout, "Config file tools.\n\nUsage:\n  cairn config init [--out FILE] [--force]   write an example config file\n")
			return 0
		}
		fmt.Fprintln(stderr, "cairn config: want the subcommand init (cairn config init --help)")
		return 2
	}
	fs := newFlagSet("config init")
	out := fs.String("out", "cairn.toml", "file to write (\"-\" for stdout)")
	force := fs.Bool("force", false, "overwrite the file if it exists")
	if code, done := parse(fs, args[1:], stdout, stderr, "cairn config init [--out FILE] [--force]",
		`Writes an example config file: every key, grouped and commented with its
meaning, environment variable and default. Keys with a plain default are set to
it (the file as written changes nothing); keys whose default is derived stay
commented out. Load it with cairn --config FILE.`); done {
		return code
	}
	if *out == "-" {
		if err := config.WriteExample(stdout); err != nil {
			fmt.Fprintf(stderr, "cairn config init: %v\n", err)
			return 1
		}
		return 0
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if *force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(*out, flags, 0o644)
	if errors.Is(err, os.ErrExist) {
		fmt.Fprintf(stderr, "cairn config init: --out %s: file exists (use --force to overwrite)\n", *out)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn config init: --out %s: %v\n", *out, err)
		return 2
	}
	err = config.WriteExample(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn config init: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "cairn config init: wrote %s\n", *out)
	return 0
}

// health runs `cairn health`: one GET of /api/v1/health, exit 0 when the node
// answers {"status":"ok"}, 1 otherwise. It needs no shell or curl, so a
// minimal container image can use it as its health check.
func health(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("health")
	def := "127.0.0.1:9000"
	if v, ok := os.LookupEnv("CAIRN_HTTP_ADDR"); ok && v != "" {
		def = v
	}
	addr := fs.String("addr", def, "the node's --http-addr (an all-interfaces address is probed on loopback)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if code, done := parse(fs, args, stdout, stderr, "cairn health [--addr HOST:PORT] [--timeout DURATION]",
		`Probes a node's liveness endpoint (GET /api/v1/health, which needs no etcd) and
exits 0 when it answers ok, 1 when it does not: a container health check that
needs neither a shell nor curl. --addr defaults to $CAIRN_HTTP_ADDR, like the node.`); done {
		return code
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil || port == "" {
		fmt.Fprintf(stderr, "cairn health: invalid --addr %q: want HOST:PORT\n", *addr)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "cairn health: invalid --timeout %s: must be positive\n", *timeout)
		return 2
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/api/v1/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "cairn health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		NodeID string `json:"node_id"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Status != "ok" {
		fmt.Fprintf(stderr, "cairn health: %s answered %s (status %q)\n", *addr, resp.Status, body.Status)
		return 1
	}
	fmt.Fprintf(stdout, "ok %s\n", body.NodeID)
	return 0
}
