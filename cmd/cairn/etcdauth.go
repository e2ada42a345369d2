package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
)

// etcdAuthEnv are the flags of etcd-auth-setup that may come from the
// node's own CAIRN_<FLAG> variables, so that in a node's environment the
// command sets up exactly the user the node logs in as.
var etcdAuthEnv = []string{"etcd-endpoints", "namespace", "etcd-cacert", "etcd-cert", "etcd-key",
	"etcd-username", "etcd-password-file", "etcd-root-password-file"}

// etcdAuthSetup runs `cairn etcd-auth-setup`: etcd's root user, Cairn's
// user and its role limited to the namespace, then etcd's auth on.
func etcdAuthSetup(args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlagSet("etcd-auth-setup")
	endpoints := fs.String("etcd-endpoints", "http://127.0.0.1:2379", "comma list of etcd client URLs")
	namespace := fs.String("namespace", "/cairn", "the Cairn cluster's key prefix: the user may read and write under it, nothing else")
	cacert := fs.String("etcd-cacert", "", "CA bundle that verifies the etcd servers")
	cert := fs.String("etcd-cert", "", "client certificate for etcd (needs --etcd-key)")
	key := fs.String("etcd-key", "", "client private key for etcd")
	user := fs.String("etcd-username", "cairn", "the user Cairn nodes log in as (their --etcd-username); its role has the same name")
	pwFile := fs.String("etcd-password-file", "", "file holding that user's password (the nodes' --etcd-password-file; or CAIRN_ETCD_PASSWORD); without either the user has no password and logs in with a client certificate whose common name is the user")
	rootFile := fs.String("etcd-root-password-file", "", "file holding etcd's root password (or CAIRN_ETCD_ROOT_PASSWORD): root is created with it when missing, and logged in as once auth is on; required")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if code, done := parse(fs, args, stdout, stderr,
		"cairn etcd-auth-setup --etcd-root-password-file FILE [--etcd-username U --etcd-password-file FILE] [--etcd-endpoints URLS --namespace NS --etcd-cacert/cert/key FILE]",
		`Turns etcd's authentication on for a Cairn cluster, on an embedded member or
an etcd cluster of your own: creates etcd's root user, a role named after
--etcd-username that may read and write the keys under --namespace and nothing
else, and that user with the role; then enables auth. From then on etcd refuses
clients without credentials, and Cairn's user cannot touch another
application's keys. Run it once, after the etcd members are up; nodes started
with --etcd-username and --etcd-password-file before or after it keep working.
Every step is idempotent: running it again (for example with a new
--etcd-password-file to change the password) is safe; once auth is on it logs
in as root. The root password is not needed by any node: keep it offline.`, etcdAuthEnv...); done {
		return code
	}
	if err := config.FlagsFromEnv(fs, etcdAuthEnv...); err != nil {
		fmt.Fprintf(stderr, "cairn etcd-auth-setup: %v\n", err)
		return 2
	}
	setup, err := readAuthSetup(*rootFile, *pwFile, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "cairn etcd-auth-setup: %v\n", err)
		return 2
	}
	setup.User, setup.Namespace = *user, *namespace
	if (*cert == "") != (*key == "") {
		fmt.Fprintln(stderr, "cairn etcd-auth-setup: --etcd-cert and --etcd-key must be given together")
		return 2
	}
	store, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: config.SplitList(*endpoints), DialTimeout: *timeout, RequestTimeout: *timeout,
		CACert: *cacert, Cert: *cert, Key: *key, Username: kv.RootUser, Password: setup.RootPassword, Namespace: *namespace})
	if err != nil {
		fmt.Fprintf(stderr, "cairn etcd-auth-setup: --etcd-endpoints %q: %v\n", *endpoints, err)
		return 2
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	done, err := store.SetupAuth(ctx, setup)
	for _, d := range done {
		fmt.Fprintf(stdout, "ok: %s\n", d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn etcd-auth-setup: %v\n", err)
		return 1
	}
	if setup.UserPassword == "" {
		fmt.Fprintf(stdout, "user %s has no password: it logs in with a client certificate whose common name is %s (etcd's --client-cert-auth)\n", setup.User, setup.User)
	}
	return 0
}

// readAuthSetup reads the passwords from their files, or from
// CAIRN_ETCD_ROOT_PASSWORD and CAIRN_ETCD_PASSWORD.
func readAuthSetup(rootFile, pwFile string, getenv func(string) (string, bool)) (kv.AuthSetup, error) {
	var a kv.AuthSetup
	for _, p := range []struct {
		flag, file, env string
		into            *string
	}{
		{"--etcd-root-password-file", rootFile, "CAIRN_ETCD_ROOT_PASSWORD", &a.RootPassword},
		{"--etcd-password-file", pwFile, "CAIRN_ETCD_PASSWORD", &a.UserPassword},
	} {
		if p.file == "" {
			*p.into, _ = getenv(p.env)
			continue
		}
		v, err := config.ReadSecretFile(p.flag, p.file)
		if err != nil {
			return a, err
		}
		*p.into = v
	}
	if a.RootPassword == "" {
		return a, errors.New("--etcd-root-password-file (or CAIRN_ETCD_ROOT_PASSWORD) is required")
	}
	return a, nil
}
