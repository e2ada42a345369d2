package config

import (
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
		fi, err := os.Stat(s.file)
		if err != nil {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: %v", s.name, s.file, err)}
		}
		if fi.Size() > maxSecretFile {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: larger than %d bytes", s.name, s.file, maxSecretFile)}
		}
		data, err := os.ReadFile(s.file)
		if err != nil {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: %v", s.name, s.file, err)}
		}
		v := strings.TrimRight(string(data), "\r\n \t")
		if v == "" {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: the file is empty", s.name, s.file)}
		}
		if *s.value != "" && *s.value != v {
			return &UsageError{Msg: fmt.Sprintf("invalid --%s-file %q: --%s is also given; use one of them", s.name, s.file, s.name)}
		}
		*s.value = v
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
