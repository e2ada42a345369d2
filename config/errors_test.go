package config

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		file  string   // TOML; "{file}" in want is replaced by its path
		exact string   // the whole message, when set
		want  []string // substrings of the message
	}{
		{name: "bad role", args: []string{"--role", "bogus"},
			exact: `invalid --role "bogus": want standalone or a comma list of etcd,master,broker,storage`},
		{name: "empty role", args: []string{"--role", " , "}, want: []string{`invalid --role " , "`, "want standalone"}},
		{name: "standalone mixed", args: []string{"--role", "standalone,broker"}, want: []string{`"standalone,broker"`, "cannot be combined"}},
		{name: "lease below minimum", args: []string{"--lease-ttl", "1s"},
			exact: `invalid --lease-ttl "1s": must be at least 2s`},
		{name: "bad duration", args: []string{"--lease-ttl", "three"}, want: []string{`invalid --lease-ttl "three"`, "duration"}},
		{name: "fractional lease", args: []string{"--lease-ttl", "2500ms"}, want: []string{`"2500ms"`, "whole number of seconds"}},
		{name: "etcd quota too small", args: []string{"--etcd-quota-backend-bytes", "4096"}, want: []string{`invalid --etcd-quota-backend-bytes "4096"`, "1 MiB"}},
		{name: "etcd quota not a number", env: map[string]string{"CAIRN_ETCD_QUOTA_BACKEND_BYTES": "2GB"}, want: []string{`invalid CAIRN_ETCD_QUOTA_BACKEND_BYTES "2GB"`, "number of bytes"}},
		{name: "negative rebalance delay", args: []string{"--rebalance-delay", "-1s"}, want: []string{`invalid --rebalance-delay "-1s"`, "at least 0s"}},
		{name: "bad address", args: []string{"--http-addr", "nonsense"},
			exact: `invalid --http-addr "nonsense": missing port in address`},
		{name: "port out of range", args: []string{"--http-addr", "127.0.0.1:99999"}, want: []string{`"127.0.0.1:99999"`, "port"}},
		{name: "undialable advertise addr", args: []string{"--advertise-addr", "0.0.0.0:9000"}, want: []string{`invalid --advertise-addr "0.0.0.0:9000"`}},
		{name: "namespace without slash", args: []string{"--namespace", "cairn"}, want: []string{`invalid --namespace "cairn"`}},
		{name: "namespace trailing slash", args: []string{"--namespace", "/cairn/"}, want: []string{`"/cairn/"`, "must not end with '/'"}},
		{name: "namespace root", args: []string{"--namespace", "/"}, want: []string{`invalid --namespace "/"`}},
		{name: "namespace empty segment", args: []string{"--namespace", "/a//b"}, want: []string{`"/a//b"`, "//"}},
		{name: "namespace blank", args: []string{"--namespace", "/a b"}, want: []string{`invalid --namespace "/a b"`}},
		{name: "label without value", args: []string{"--node-labels", "zone"}, want: []string{"--node-labels", `label "zone": want key=value`}},
		{name: "label key twice", args: []string{"--node-labels", "zone=a,zone=b"}, want: []string{"--node-labels", `label key "zone" given twice`}},
		{name: "bad label value", args: []string{"--node-labels", "zone=a b"}, want: []string{"--node-labels", "1 to 64"}},
		{name: "weight zero", args: []string{"--node-weight", "0"}, want: []string{"--node-weight", "1 to 1000"}},
		{name: "weight too big", args: []string{"--node-weight", "1001"}, want: []string{"--node-weight", "1 to 1000"}},
		{name: "disk pct too big", args: []string{"--retention-max-disk-pct", "100"}, want: []string{"--retention-max-disk-pct", "from 1 to 99, or 0"}},
		{name: "disk pct negative", args: []string{"--retention-max-disk-pct", "-1"}, want: []string{"--retention-max-disk-pct", "from 1 to 99, or 0"}},
		{name: "bad cluster name", args: []string{"--storage-cluster", "no way!"}, want: []string{`invalid --storage-cluster "no way!"`, "1 to 64"}},
		{name: "cluster name too long", args: []string{"--storage-cluster", strings.Repeat("a", 65)}, want: []string{"--storage-cluster", strings.Repeat("a", 65)}},
		{name: "bad cluster state", args: []string{"--etcd-cluster-state", "maybe"},
			exact: `invalid --etcd-cluster-state "maybe": want one of new, existing`},
		{name: "bad endpoint scheme", args: []string{"--etcd-endpoints", "http://127.0.0.1:2379,ftp://h:1"}, want: []string{`invalid --etcd-endpoints`, `"ftp://h:1"`, "http"}},
		{name: "endpoint without port", args: []string{"--etcd-endpoints", "http://etcd"}, want: []string{`"http://etcd"`, "port"}},
		{name: "listen url without scheme", args: []string{"--etcd-listen-peer-url", "localhost:2380"}, want: []string{`invalid --etcd-listen-peer-url "localhost:2380"`}},
		{name: "listen url with path", args: []string{"--etcd-listen-client-url", "http://127.0.0.1:2379/x"}, want: []string{`"http://127.0.0.1:2379/x"`, "host:port only"}},
		{name: "initial cluster without this member", args: []string{"--etcd-initial-cluster", "a=http://127.0.0.1:2380"},
			want: []string{`invalid --etcd-initial-cluster "a=http://127.0.0.1:2380"`, "must include this member", `"default"`}},
		{name: "initial cluster malformed", args: []string{"--etcd-initial-cluster", "default"}, want: []string{`invalid --etcd-initial-cluster "default"`, "name=peer-url"}},
		{name: "initial cluster duplicate", args: []string{"--etcd-initial-cluster", "default=http://a:1,default=http://b:1"}, want: []string{"listed twice"}},
		{name: "cert without key", args: []string{"--etcd-cert", "c.pem"}, want: []string{"--etcd-cert and --etcd-key"}},
		{name: "password without user", args: []string{"--etcd-password", "pw"}, want: []string{"--etcd-username"}},
		{name: "member https without cert", args: []string{"--etcd-listen-client-url", "https://127.0.0.1:2379"},
			exact: `invalid etcd member TLS: --etcd-listen-client-url "https://127.0.0.1:2379" is https: it needs --etcd-cert-file and --etcd-key-file`},
		{name: "member cert on http", args: []string{"--etcd-cert-file", "c.pem", "--etcd-key-file", "k.pem"},
			want: []string{"--etcd-cert-file is set but --etcd-listen-client-url", "not https"}},
		{name: "member cert without key", args: []string{"--etcd-listen-client-url", "https://127.0.0.1:2379", "--etcd-cert-file", "c.pem"},
			want: []string{"--etcd-cert-file and --etcd-key-file must be given together"}},
		{name: "member client auth without ca", args: []string{"--etcd-listen-client-url", "https://127.0.0.1:2379",
			"--etcd-cert-file", "c.pem", "--etcd-key-file", "k.pem", "--etcd-client-cert-auth"},
			want: []string{"--etcd-client-cert-auth needs --etcd-trusted-ca-file"}},
		{name: "peer https without cert", args: []string{"--etcd-listen-peer-url", "https://127.0.0.1:2380"},
			want: []string{`--etcd-listen-peer-url "https://127.0.0.1:2380" is https`, "--etcd-peer-cert-file"}},
		{name: "peer ca without cert", args: []string{"--etcd-peer-trusted-ca-file", "ca.pem"},
			want: []string{"--etcd-peer-trusted-ca-file needs --etcd-peer-cert-file"}},
		{name: "peer client auth not a bool", args: []string{"--etcd-peer-client-cert-auth=maybe"},
			want: []string{`invalid --etcd-peer-client-cert-auth "maybe"`}},
		{name: "zero min insync", args: []string{"--min-insync-replicas", "0"}, want: []string{`invalid --min-insync-replicas "0"`}},
		{name: "bad log level", args: []string{"--log-level", "verbose"}, want: []string{`invalid --log-level "verbose"`, "debug, info, warn, error"}},
		{name: "bad log format", args: []string{"--log-format", "xml"}, want: []string{`invalid --log-format "xml"`}},
		{name: "bad node id", args: []string{"--node-id", "a/b"}, want: []string{`invalid --node-id "a/b"`}},
		{name: "empty data dir", args: []string{"--data-dir", ""}, want: []string{`invalid --data-dir ""`}},
		{name: "unknown flag", args: []string{"--bogus", "1"}, want: []string{"-bogus"}},
		{name: "missing flag value", args: []string{"--role"}, want: []string{"-role"}},
		{name: "positional argument", args: []string{"--role", "broker", "extra"}, want: []string{`"extra"`}},
		{name: "empty config flag", args: []string{"--config", ""}, want: []string{"--config"}},
		{name: "bad env value", env: map[string]string{"CAIRN_ROLE": "bogus"},
			exact: `invalid CAIRN_ROLE "bogus": want standalone or a comma list of etcd,master,broker,storage`},
		{name: "bad env duration", env: map[string]string{"CAIRN_LEASE_TTL": "1s"}, want: []string{`invalid CAIRN_LEASE_TTL "1s"`, "at least 2s"}},
		{name: "bad file value", file: `role = "bogus"`,
			exact: `invalid role = "bogus" in {file}: want standalone or a comma list of etcd,master,broker,storage`},
		{name: "bad file value overridden by flag still reported", file: `lease-ttl = "1s"`, args: []string{"--lease-ttl", "5s"},
			want: []string{`invalid lease-ttl = "1s" in {file}`}},
		{name: "unknown file key", file: "role = \"broker\"\ncolour = \"blue\"", want: []string{`unknown key "colour"`, "{file}"}},
		{name: "env-style file key", file: `http_addr = "127.0.0.1:1"`, want: []string{`unknown key "http_addr"`, `did you mean "http-addr"`}},
		{name: "nested file table", file: "[etcd]\nname = \"x\"", want: []string{`unknown key "etcd"`}},
		{name: "unparsable file", file: "role = ", want: []string{"cannot parse config file {file}"}},
		{name: "duration as number", file: `lease-ttl = 3`, want: []string{"lease-ttl", "{file}", `duration string such as "3s"`}},
		{name: "array for a scalar key", file: `http-addr = ["a:1"]`, want: []string{"http-addr", "want a string"}},
		{name: "array of numbers", file: `role = [1]`, want: []string{"role", "array of strings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			path := ""
			if tt.file != "" {
				path = writeTOML(t, tt.file)
				args = append([]string{"--config", path}, args...)
			}
			_, err := Parse(args, envOf(tt.env), false, io.Discard)
			var ue *UsageError
			require.ErrorAs(t, err, &ue)
			if tt.exact != "" {
				require.Equal(t, strings.ReplaceAll(tt.exact, "{file}", path), ue.Error())
			}
			for _, w := range tt.want {
				require.Contains(t, ue.Error(), strings.ReplaceAll(w, "{file}", path))
			}
		})
	}
}

func TestParseUnreadableFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.toml")
	_, err := Parse([]string{"--config", missing}, envOf(nil), false, io.Discard)
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, "cannot read config file "+missing)

	dir := t.TempDir() // a directory cannot be read as a file
	_, err = Parse(nil, envOf(map[string]string{"CAIRN_CONFIG": dir}), false, io.Discard)
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, dir)
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		var out bytes.Buffer
		_, err := Parse([]string{"--role", "broker", arg}, envOf(nil), false, &out)
		require.ErrorIs(t, err, ErrHelp)
		require.ErrorIs(t, err, flag.ErrHelp)
		var ue *UsageError
		require.False(t, errors.As(err, &ue), "help is not a usage error")

		help := out.String()
		for _, o := range options {
			require.Regexp(t, "--"+o.name+"[ \n]", help)
			require.Contains(t, help, envName(o.name))
		}
		for _, s := range []string{
			"--config FILE", "CAIRN_CONFIG", "CAIRN_HTTP_ADDR",
			"default: 127.0.0.1:9000", "default: 3s", "default: standalone", "default: /cairn",
			"cairn backup", "cairn restore", "cairn simulate", "cairn version",
			"--etcd-initial-cluster $CLUSTER",
		} {
			require.Contains(t, help, s)
		}
	}
}

func TestEnvName(t *testing.T) {
	require.Equal(t, "CAIRN_HTTP_ADDR", envName("http-addr"))
	require.Equal(t, "CAIRN_ETCD_LISTEN_CLIENT_URL", envName("etcd-listen-client-url"))
}
