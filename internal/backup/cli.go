package backup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
)

// Exit codes of Main.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure: etcd unreachable, write error
	exitUsage   = 2 // bad flags, corrupt file, non-empty namespace without --force
)

// connFlags are the flags that may also come from CAIRN_<FLAG> in the
// environment, like a node's. --out, --in and --force are deliberately not
// among them: a destructive restore should never hide in the environment.
var connFlags = []string{"etcd-endpoints", "namespace", "etcd-cacert", "etcd-cert", "etcd-key",
	"etcd-username", "etcd-password", "etcd-password-file", "timeout"}

type cliFlags struct {
	out, in   string
	force     bool
	endpoints string
	namespace string
	cacert    string
	cert, key string
	username  string
	password  string
	pwFile    string
	timeout   time.Duration
}

// Main runs `cairn backup ...` or `cairn restore ...`: cmd is "backup" or
// "restore" and args the flags after it. It returns the exit code: 0 ok, 1
// runtime failure, 2 bad flags, corrupt file or non-empty namespace without
// --force. Messages go to stderr and name the bad value; stdout carries only
// the backup itself with --out -.
func Main(cmd string, args []string, stdout, stderr io.Writer) int {
	if cmd != "backup" && cmd != "restore" {
		fmt.Fprintf(stderr, "cairn: unknown command %q (want backup or restore)\n", cmd)
		return exitUsage
	}
	f, err := parseFlags(cmd, args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn %s: %v\n", cmd, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := kv.NewEtcdStore(kv.EtcdConfig{
		Endpoints: config.SplitList(f.endpoints), DialTimeout: f.timeout, RequestTimeout: f.timeout,
		CACert: f.cacert, Cert: f.cert, Key: f.key, Username: f.username, Password: f.password, Namespace: f.namespace,
	})
	if err != nil {
		fmt.Fprintf(stderr, "cairn %s: --etcd-endpoints %q: %v\n", cmd, f.endpoints, err)
		return exitUsage
	}
	defer store.Close()
	o := Options{Store: store, Namespace: f.namespace, Progress: stderr}
	if cmd == "backup" {
		err = runBackup(ctx, o, f.out, stdout, stderr)
	} else {
		err = runRestore(ctx, o, f.in, f.force, stderr)
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, kv.ErrUnavailable) {
		fmt.Fprintf(stderr, "cairn %s: etcd at %s did not answer within --timeout %v: %v\n", cmd, f.endpoints, f.timeout, err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "cairn %s: %v\n", cmd, err)
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotEmpty) || errors.Is(err, ErrOutsideNamespace) ||
		errors.Is(err, ErrBadOptions) || errors.Is(err, errBadPath) {
		return exitUsage
	}
	return exitFailure
}

// usage texts of the two commands, for --help.
var usage = map[string][2]string{
	"backup": {"cairn backup --out FILE [--etcd-endpoints URLS --namespace NS ...]",
		`Logical backup of a Cairn namespace: every key at one etcd revision, in a
versioned, checksummed JSON file. It is written to a temporary file renamed into
place, so a failed backup never leaves a partial file under FILE.`},
	"restore": {"cairn restore --in FILE [--force] [--etcd-endpoints URLS --namespace NS ...]",
		`Restores a backup (or a node's <data-dir>/state.backup) into an empty namespace.
A corrupt file or a non-empty namespace (without --force) is refused before
anything is written.`},
}

// parseFlags parses the flags of cmd; --help writes its help to stdout and
// returns flag.ErrHelp.
func parseFlags(cmd string, args []string, stdout io.Writer) (cliFlags, error) {
	var f cliFlags
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if cmd == "backup" {
		fs.StringVar(&f.out, "out", "", "file to write the backup to (\"-\" for stdout); required")
	} else {
		fs.StringVar(&f.in, "in", "", "backup file to restore (\"-\" for stdin), or a node's state.backup; required")
		fs.BoolVar(&f.force, "force", false, "delete the namespace's keys before restoring into a non-empty namespace")
	}
	fs.StringVar(&f.endpoints, "etcd-endpoints", "http://127.0.0.1:2379", "comma-separated etcd client URLs")
	fs.StringVar(&f.namespace, "namespace", "/cairn", "key prefix of this Cairn cluster in etcd")
	fs.StringVar(&f.cacert, "etcd-cacert", "", "CA certificate to verify etcd")
	fs.StringVar(&f.cert, "etcd-cert", "", "client certificate for etcd")
	fs.StringVar(&f.key, "etcd-key", "", "client key for etcd")
	fs.StringVar(&f.username, "etcd-username", "", "etcd user")
	fs.StringVar(&f.password, "etcd-password", "", "etcd password (prefer --etcd-password-file or CAIRN_ETCD_PASSWORD: flags show in ps)")
	fs.StringVar(&f.pwFile, "etcd-password-file", "", "file holding the etcd password")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "bound on each etcd request")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		config.CommandUsage(stdout, fs, usage[cmd][0], usage[cmd][1], connFlags...)
		return f, err
	} else if err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := config.FlagsFromEnv(fs, connFlags...); err != nil {
		return f, err
	}
	if f.pwFile != "" {
		if f.password != "" {
			return f, errors.New("--etcd-password and --etcd-password-file are both given; use one of them")
		}
		pw, err := config.ReadSecretFile("--etcd-password-file", f.pwFile)
		if err != nil {
			return f, err
		}
		f.password = pw
	}
	switch {
	case cmd == "backup" && f.out == "":
		return f, errors.New("--out FILE is required (\"-\" writes to stdout)")
	case cmd == "restore" && f.in == "":
		return f, errors.New("--in FILE is required")
	case f.timeout <= 0:
		return f, fmt.Errorf("--timeout %v: must be positive", f.timeout)
	case len(config.SplitList(f.endpoints)) == 0:
		return f, fmt.Errorf("--etcd-endpoints %q: no endpoint", f.endpoints)
	}
	return f, nil
}

// errBadPath marks an --in or --out path that cannot be used (exit 2).
var errBadPath = errors.New("bad path")

// runBackup writes to a temp file renamed into place on success, so a failed
// or interrupted backup never leaves a half file under the requested name.
func runBackup(ctx context.Context, o Options, out string, stdout, stderr io.Writer) error {
	if out == "-" {
		s, err := Backup(ctx, o, stdout)
		if err == nil {
			report(stderr, "backup", s, "stdout")
		}
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".tmp*")
	if err != nil {
		return fmt.Errorf("%w: --out %s: %w", errBadPath, out, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	s, err := Backup(ctx, o, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return err
	}
	report(stderr, "backup", s, out)
	return nil
}

func runRestore(ctx context.Context, o Options, in string, force bool, stderr io.Writer) error {
	var r io.Reader = os.Stdin
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return fmt.Errorf("%w: --in %s: %w", errBadPath, in, err)
		}
		defer f.Close()
		r = f
	}
	s, err := Restore(ctx, o, r, force)
	if err != nil {
		return fmt.Errorf("--in %s: %w", in, err)
	}
	report(stderr, "restore", s, in)
	return nil
}

func report(w io.Writer, what string, s Summary, file string) {
	fmt.Fprintf(w, "%s: %d keys, revision %d, %d bytes (%s)\n", what, s.Keys, s.Revision, s.Bytes, file)
}
