package config

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeTOML(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cairn.toml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(nil, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{RoleEtcd, RoleMaster, RoleBroker, RoleStorage}, c.Roles)
	require.True(t, c.Standalone)
	require.Empty(t, c.NodeID)
	require.Equal(t, "./cairn-data", c.DataDir)
	require.Equal(t, "127.0.0.1:9000", c.HTTPAddr)
	require.Equal(t, "127.0.0.1:9000", c.AdvertiseAddr)
	require.Equal(t, []string{"http://127.0.0.1:2379"}, c.EtcdEndpoints)
	require.Equal(t, "/cairn", c.Namespace)
	require.Equal(t, "default", c.StorageCluster)
	require.Equal(t, 3*time.Second, c.LeaseTTL)
	require.Equal(t, "default", c.EtcdName)
	require.Equal(t, "http://127.0.0.1:2379", c.EtcdListenClientURL)
	require.Equal(t, "http://127.0.0.1:2380", c.EtcdListenPeerURL)
	require.Equal(t, "http://127.0.0.1:2379", c.EtcdAdvertiseClientURL)
	require.Equal(t, "http://127.0.0.1:2380", c.EtcdAdvertisePeerURL)
	require.Equal(t, "default=http://127.0.0.1:2380", c.EtcdInitialCluster)
	require.Equal(t, "new", c.EtcdClusterState)
	require.Equal(t, "info", c.LogLevel)
	require.Equal(t, "json", c.LogFormat)
	require.Equal(t, 1, c.MinInsyncReplicas)
	require.Equal(t, 30*time.Second, c.RebalanceDelay)
	require.Empty(t, c.ConfigFile)
	require.True(t, c.HasRole(RoleStorage))

	c, err = Parse(nil, envOf(nil), true, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "console", c.LogFormat, "a terminal gets human-readable logs")
}

func TestParsePrecedence(t *testing.T) {
	tests := []struct {
		name string
		file string // TOML; empty means no file
		env  map[string]string
		args []string
		get  func(Config) any
		want any
	}{
		{
			name: "flag beats env",
			env:  map[string]string{"CAIRN_HTTP_ADDR": "127.0.0.1:1"},
			args: []string{"--http-addr", "127.0.0.1:2"},
			get:  func(c Config) any { return c.HTTPAddr },
			want: "127.0.0.1:2",
		},
		{
			name: "env beats file",
			file: `http-addr = "127.0.0.1:3"`,
			env:  map[string]string{"CAIRN_HTTP_ADDR": "127.0.0.1:1"},
			get:  func(c Config) any { return c.HTTPAddr },
			want: "127.0.0.1:1",
		},
		{
			name: "file beats default",
			file: `lease-ttl = "5s"`,
			get:  func(c Config) any { return c.LeaseTTL },
			want: 5 * time.Second,
		},
		{
			name: "flag beats file",
			file: `storage-cluster = "from-file"`,
			args: []string{"--storage-cluster=from-flag"},
			get:  func(c Config) any { return c.StorageCluster },
			want: "from-flag",
		},
		{
			name: "node labels from env",
			env:  map[string]string{"CAIRN_NODE_LABELS": "zone=a,rack=r7"},
			get:  func(c Config) any { return c.NodeLabels },
			want: map[string]string{"zone": "a", "rack": "r7"},
		},
		{
			name: "node labels from file, flag beats it",
			file: `node-labels = ["zone=b"]`,
			args: []string{"--node-labels", "zone=c"},
			get:  func(c Config) any { return c.NodeLabels },
			want: map[string]string{"zone": "c"},
		},
		{
			name: "node weight from file",
			file: `node-weight = 3`,
			get:  func(c Config) any { return c.NodeWeight },
			want: 3,
		},
		{
			name: "node weight default",
			get:  func(c Config) any { return c.NodeWeight },
			want: 1,
		},
		{
			name: "env beats default",
			env:  map[string]string{"CAIRN_REBALANCE_DELAY": "1m"},
			get:  func(c Config) any { return c.RebalanceDelay },
			want: time.Minute,
		},
		{
			name: "empty env var counts as unset",
			file: `namespace = "/from-file"`,
			env:  map[string]string{"CAIRN_NAMESPACE": ""},
			get:  func(c Config) any { return c.Namespace },
			want: "/from-file",
		},
		{
			name: "single dash flag",
			args: []string{"-role", "broker"},
			get:  func(c Config) any { return c.Roles },
			want: []string{RoleBroker},
		},
		{
			name: "roles sorted and deduplicated",
			args: []string{"--role", "storage, broker,storage,"},
			get:  func(c Config) any { return c.Roles },
			want: []string{RoleBroker, RoleStorage},
		},
		{
			name: "advertise addr defaults to http addr",
			args: []string{"--http-addr", "10.0.0.5:9100"},
			get:  func(c Config) any { return c.AdvertiseAddr },
			want: "10.0.0.5:9100",
		},
		{
			name: "endpoints follow the embedded member",
			args: []string{"--etcd-listen-client-url", "http://127.0.0.1:3379"},
			get:  func(c Config) any { return c.EtcdEndpoints },
			want: []string{"http://127.0.0.1:3379"},
		},
		{
			name: "endpoints default without the etcd role",
			args: []string{"--role", "broker", "--etcd-listen-client-url", "http://127.0.0.1:3379"},
			get:  func(c Config) any { return c.EtcdEndpoints },
			want: []string{"http://127.0.0.1:2379"},
		},
		{
			name: "initial cluster follows name and peer url",
			args: []string{"--etcd-name", "n1", "--etcd-advertise-peer-url", "http://10.0.0.1:2380"},
			get:  func(c Config) any { return c.EtcdInitialCluster },
			want: "n1=http://10.0.0.1:2380",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeTOML(t, tt.file)}, args...)
			}
			c, err := Parse(args, envOf(tt.env), false, io.Discard)
			require.NoError(t, err)
			require.Equal(t, tt.want, tt.get(c))
		})
	}
}

func TestParseConfigFileLocation(t *testing.T) {
	envFile := writeTOML(t, `storage-cluster = "from-env-file"`)
	flagFile := writeTOML(t, `storage-cluster = "from-flag-file"`)

	c, err := Parse(nil, envOf(map[string]string{"CAIRN_CONFIG": envFile}), false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "from-env-file", c.StorageCluster)
	require.Equal(t, envFile, c.ConfigFile)

	c, err = Parse([]string{"--config", flagFile}, envOf(map[string]string{"CAIRN_CONFIG": envFile}), false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "from-flag-file", c.StorageCluster, "--config beats CAIRN_CONFIG")
	require.Equal(t, flagFile, c.ConfigFile)
}

func TestParseFileArraysAndTypes(t *testing.T) {
	path := writeTOML(t, `
role = ["storage", "broker"]
etcd-endpoints = ["http://10.0.0.1:2379", "https://10.0.0.2:2379"]
min-insync-replicas = 2
lease-ttl = "4s"
admin-token = "s3cret"
etcd-username = "cairn"
etcd-password = "pw"
`)
	c, err := Parse([]string{"--config", path}, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{RoleBroker, RoleStorage}, c.Roles)
	require.False(t, c.Standalone)
	require.False(t, c.HasRole(RoleEtcd))
	require.Equal(t, []string{"http://10.0.0.1:2379", "https://10.0.0.2:2379"}, c.EtcdEndpoints)
	require.Equal(t, 2, c.MinInsyncReplicas)
	require.Equal(t, 4*time.Second, c.LeaseTTL)
	require.Equal(t, "s3cret", c.AdminToken)

	r := c.Redacted()
	require.NotContains(t, r.AdminToken+r.EtcdPassword, "s3cret")
	require.NotContains(t, r.EtcdPassword, "pw")
	require.Equal(t, "s3cret", c.AdminToken, "Redacted must not change the original")
}

func TestValidateProgrammatic(t *testing.T) {
	c := Default()
	c.Roles = []string{RoleStorage, RoleMaster}
	c.Standalone = false
	require.NoError(t, c.Validate())
	require.Equal(t, []string{RoleMaster, RoleStorage}, c.Roles, "Validate normalizes role order")
	require.Equal(t, "127.0.0.1:9000", c.AdvertiseAddr)

	again := c
	again.Roles = append([]string(nil), c.Roles...)
	require.NoError(t, again.Validate())
	require.Equal(t, c, again, "Validate is idempotent")

	var zero Config
	err := zero.Validate()
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, "--role")

	wild := Default()
	wild.HTTPAddr = "0.0.0.0:9000"
	require.NoError(t, wild.Validate())
	require.NotContains(t, wild.AdvertiseAddr, "0.0.0.0", "a wildcard listen address is not dialable")
	require.Contains(t, wild.AdvertiseAddr, ":9000")
}

func TestParseMemtableMaxBytes(t *testing.T) {
	c, err := Parse(nil, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.MemtableMaxBytes, "0: the engine's memory-derived default")
	c, err = Parse([]string{"--memtable-max-bytes", "67108864"}, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 64<<20, c.MemtableMaxBytes)
	c, err = Parse(nil, envOf(map[string]string{"CAIRN_MEMTABLE_MAX_BYTES": "2097152"}), false, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 2<<20, c.MemtableMaxBytes)
	for _, bad := range []string{"1000", "-1", "64MiB"} {
		_, err = Parse([]string{"--memtable-max-bytes", bad}, envOf(nil), false, io.Discard)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), bad)
	}
}

func TestParseMemoryLimitAndInflightWrites(t *testing.T) {
	c, err := Parse(nil, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.MemoryLimit)
	require.EqualValues(t, 64<<20, c.InflightWriteBytes(), "2x the 32 MiB body limit")
	c, err = Parse([]string{"--memory-limit", "536870912", "--write-max-inflight-bytes", "1000", "--write-max-body-bytes", "100000000"}, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 512<<20, c.MemoryLimit)
	require.EqualValues(t, 1000, c.InflightWriteBytes())
	c, err = Parse([]string{"--write-max-body-bytes", "100000000"}, envOf(map[string]string{"CAIRN_MEMORY_LIMIT": "67108864"}), false, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 64<<20, c.MemoryLimit)
	require.EqualValues(t, 200000000, c.InflightWriteBytes())
	for _, bad := range [][]string{{"--memory-limit", "1000"}, {"--memory-limit", "-1"}, {"--write-max-inflight-bytes", "-5"}, {"--write-max-inflight-bytes", "1GiB"}} {
		_, err = Parse(bad, envOf(nil), false, io.Discard)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), bad[1])
	}
}

// TestParseInsecure: --insecure stands alone or takes a value, and comes
// from env and file like any option; a value that is not a boolean is
// refused.
func TestParseInsecure(t *testing.T) {
	c, err := Parse(nil, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.False(t, c.Insecure)
	for _, args := range [][]string{{"--insecure"}, {"--insecure=true"}, {"--insecure", "--role", "broker"}} {
		c, err = Parse(args, envOf(nil), false, io.Discard)
		require.NoError(t, err, args)
		require.True(t, c.Insecure, args)
	}
	c, err = Parse([]string{"--insecure=false"}, envOf(map[string]string{"CAIRN_INSECURE": "true"}), false, io.Discard)
	require.NoError(t, err)
	require.False(t, c.Insecure, "the flag beats the env")
	file := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(file, []byte("insecure = true\n"), 0o600))
	c, err = Parse([]string{"--config", file}, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.True(t, c.Insecure)
	_, err = Parse([]string{"--insecure=maybe"}, envOf(nil), false, io.Discard)
	require.ErrorContains(t, err, "maybe")
}

// TestParseEtcdMemberTLS: the member's TLS flags are kept, the switches
// stand alone, and a node with the etcd role trusts and authenticates as
// its member unless the client flags say otherwise; a node without the
// role derives nothing.
func TestParseEtcdMemberTLS(t *testing.T) {
	member := []string{"--etcd-listen-client-url", "https://127.0.0.1:2379", "--etcd-cert-file", "m.pem", "--etcd-key-file", "m-key.pem",
		"--etcd-trusted-ca-file", "ca.pem", "--etcd-client-cert-auth",
		"--etcd-listen-peer-url", "https://127.0.0.1:2380", "--etcd-peer-cert-file", "p.pem", "--etcd-peer-key-file", "p-key.pem",
		"--etcd-peer-trusted-ca-file", "pca.pem", "--etcd-peer-client-cert-auth"}
	c, err := Parse(member, envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.True(t, c.EtcdClientCertAuth)
	require.True(t, c.EtcdPeerClientCertAuth)
	require.Equal(t, []string{"p.pem", "p-key.pem", "pca.pem"}, []string{c.EtcdPeerCertFile, c.EtcdPeerKeyFile, c.EtcdPeerTrustedCAFile})
	require.Equal(t, []string{"https://127.0.0.1:2379"}, c.EtcdEndpoints)
	require.Equal(t, []string{"ca.pem", "m.pem", "m-key.pem"}, []string{c.EtcdCACert, c.EtcdCert, c.EtcdKey}, "the client defaults to the member's files")

	c, err = Parse(append(member, "--etcd-cacert", "other-ca.pem", "--etcd-cert", "n.pem", "--etcd-key", "n-key.pem"), envOf(nil), false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"other-ca.pem", "n.pem", "n-key.pem"}, []string{c.EtcdCACert, c.EtcdCert, c.EtcdKey}, "given client flags win")

	c, err = Parse([]string{"--role", "broker", "--etcd-cert-file", "m.pem", "--etcd-key-file", "m-key.pem", "--etcd-trusted-ca-file", "ca.pem"}, envOf(nil), false, io.Discard)
	require.NoError(t, err, "member flags are not checked without the etcd role")
	require.Empty(t, c.EtcdCACert+c.EtcdCert+c.EtcdKey, "no member, nothing derived")
}
