package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
// minimal container image can use it as its health check. It reads the node's
// own settings (environment and $CAIRN_CONFIG) for the address and for TLS.
func health(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("health")
	node := nodeSettings()
	addr := fs.String("addr", node.HTTPAddr, "the node's --http-addr (an all-interfaces address is probed on loopback)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	useTLS := fs.Bool("tls", node.TLSCert != "", "probe over HTTPS; on by default when the node's --tls-cert is set")
	caFile := fs.String("tls-ca", node.TLSCA, "CA bundle (PEM) that verifies the node's certificate; by default the node's --tls-ca")
	if code, done := parse(fs, args, stdout, stderr, "cairn health [--addr HOST:PORT] [--timeout DURATION] [--tls] [--tls-ca FILE]",
		`Probes a node's liveness endpoint (GET /api/v1/health, which needs no etcd) and
exits 0 when it answers ok, 1 when it does not: a container health check that
needs neither a shell nor curl. Its defaults come from the node's own settings
(CAIRN_* environment and $CAIRN_CONFIG), so in the node's container it needs
no flags: --addr is the node's --http-addr, and HTTPS is used when the node's
--tls-cert is set. Over HTTPS the node's certificate is verified against
--tls-ca (on a loopback address: the chain only, as the probe dials 127.0.0.1,
which the certificate need not name). Without a CA, a loopback probe does NOT
verify the certificate (it checks that the node is alive, not who it is); a
probe of another host verifies against the system roots.`); done {
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
	scheme, client := "http", &http.Client{}
	if *useTLS {
		cfg, err := healthTLS(host, *caFile)
		if err != nil {
			fmt.Fprintf(stderr, "cairn health: invalid --tls-ca %q: %v\n", *caFile, err)
			return 2
		}
		scheme, client = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/api/v1/health", nil)
	resp, err := client.Do(req)
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

// nodeSettings are the node's settings as its environment and config file
// give them; when they do not parse (the node would not start either), the
// address and TLS variables are read alone.
func nodeSettings() config.Config {
	c, err := config.Parse(nil, os.LookupEnv, false, io.Discard)
	if err == nil {
		return c
	}
	c = config.Config{HTTPAddr: "127.0.0.1:9000"}
	if v := os.Getenv("CAIRN_HTTP_ADDR"); v != "" {
		c.HTTPAddr = v
	}
	c.TLSCert, c.TLSCA = os.Getenv("CAIRN_TLS_CERT"), os.Getenv("CAIRN_TLS_CA")
	return c
}

// healthTLS is the probe's TLS client config for host (see health's help).
func healthTLS(host, caFile string) (*tls.Config, error) {
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if caFile == "" {
		if loopback {
			return &tls.Config{InsecureSkipVerify: true}, nil // liveness of the local node, as --help says
		}
		return &tls.Config{ServerName: host}, nil
	}
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("no PEM certificate in it")
	}
	if !loopback {
		return &tls.Config{RootCAs: pool, ServerName: host}, nil
	}
	return &tls.Config{
		InsecureSkipVerify: true, // the chain is verified below; only the name is not
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the node presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}, nil
}
