package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// maxSecretFile bounds a secret file: a secret is a line, not a data set.
const maxSecretFile = 4096

// readSecretFiles reads each *-file option into its secret. Giving both the
// value and the file is refused unless they agree (so Validate may run
// twice). Messages never quote a secret.
func (c *Config) readSecretFiles() error {
	for _, s := range []struct {
		name  string
		file  string
		value *string
	}{
		{"cluster-secret", c.ClusterSecretFile, &c.ClusterSecret},
		{"admin-token", c.AdminTokenFile, &c.AdminToken},
		{"write-token", c.WriteTokenFile, &c.WriteToken},
		{"read-token", c.ReadTokenFile, &c.ReadToken},
		{"etcd-password", c.EtcdPasswordFile, &c.EtcdPassword},
	} {
		if s.file == "" {
			continue
		}
		v, err := ReadSecretFile("--"+s.name+"-file", s.file)
		if err != nil {
			return err
		}
		if *s.value != "" && *s.value != v {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: --%s is also given; use one of them", s.name, s.file, s.name)}
		}
		*s.value = v
	}
	return nil
}

// ReadSecretFile reads a secret (a password, a token) from a file named by
// flag: trailing newlines and blanks are dropped; a missing, empty or
// oversized file is a *UsageError naming flag and path, never the content.
func ReadSecretFile(flag, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", &UsageError{Msg: fmt.Sprintf("invalid %s %q: %v", flag, path, err)}
	}
	if fi.Size() > maxSecretFile {
		return "", &UsageError{Msg: fmt.Sprintf("invalid %s %q: larger than %d bytes", flag, path, maxSecretFile)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", &UsageError{Msg: fmt.Sprintf("invalid %s %q: %v", flag, path, err)}
	}
	v := strings.TrimRight(string(data), "\r\n \t")
	if v == "" {
		return "", &UsageError{Msg: fmt.Sprintf("invalid %s %q: the file is empty", flag, path)}
	}
	return v, nil
}

// FlagsFromEnv sets each named flag of a subcommand that the command line
// did not give from its CAIRN_<FLAG> environment variable, as a node's
// flags are: the command line beats the environment, and an empty variable
// counts as unset.
func FlagsFromEnv(fs *flag.FlagSet, names ...string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range names {
		v, ok := os.LookupEnv(envName(name))
		if given[name] || !ok || v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%s=%q: %v", envName(name), v, err)
		}
	}
	return nil
}

// RedactArgs returns a copy of a command line with the values of secret
// flags (--admin-token X, --cluster-secret=X, ...) replaced by <redacted>:
// what /debug/pprof/cmdline serves.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		o, ok := lookupOption(name)
		if !ok || !o.secret {
			continue
		}
		if hasValue {
			out[i] = a[:strings.Index(a, "=")+1] + "<redacted>"
		} else if i+1 < len(out) {
			out[i+1] = "<redacted>"
			i++
		}
	}
	return out
}
