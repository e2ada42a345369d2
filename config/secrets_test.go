package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSecretSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(file, []byte("from-file\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	toml := writeTOML(t, `cluster-secret = "from-toml"
read-token = "r-toml"`)

	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		errHas  string
		flagged []string
	}{
		{name: "file", args: []string{"--cluster-secret-file", file, "--admin-token-file", file},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "from-file", c.ClusterSecret)
				require.Equal(t, "from-file", c.AdminToken)
			}},
		{name: "env", env: map[string]string{"CAIRN_CLUSTER_SECRET": "e1", "CAIRN_WRITE_TOKEN": "w1", "CAIRN_READ_TOKEN_FILE": file},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "e1", c.ClusterSecret)
				require.Equal(t, "w1", c.WriteToken)
				require.Equal(t, "from-file", c.ReadToken)
				require.Empty(t, c.SecretFlags, "env is not a flag")
			}},
		{name: "toml", args: []string{"--config", toml},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "from-toml", c.ClusterSecret)
				require.Equal(t, "r-toml", c.ReadToken)
			}},
		{name: "flag is recorded", args: []string{"--cluster-secret", "f1", "--read-token", "r1", "--log-level", "debug"},
			flagged: []string{"cluster-secret", "read-token"},
			check:   func(t *testing.T, c Config) { require.Equal(t, "f1", c.ClusterSecret) }},
		{name: "etcd password file", args: []string{"--etcd-username", "cairn", "--etcd-password-file", file},
			check: func(t *testing.T, c Config) { require.Equal(t, "from-file", c.EtcdPassword) }},
		{name: "etcd password file without user", env: map[string]string{"CAIRN_ETCD_PASSWORD_FILE": file}, errHas: "it needs --etcd-username"},
		{name: "both", args: []string{"--admin-token", "x", "--admin-token-file", file}, errHas: "--admin-token is also given"},
		{name: "missing file", args: []string{"--write-token-file", filepath.Join(dir, "nope")}, errHas: "--write-token-file"},
		{name: "empty file", args: []string{"--cluster-secret-file", empty}, errHas: "the file is empty"},
		{name: "tls half", args: []string{"--tls-cert", "c.pem"}, errHas: "--tls-cert and --tls-key"},
		{name: "tls ca alone", args: []string{"--tls-client-ca", "ca.pem"}, errHas: "need --tls-cert"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.args, envOf(tc.env), false, &bytes.Buffer{})
			if tc.errHas != "" {
				var ue *UsageError
				require.True(t, errors.As(err, &ue), "want a usage error, got %v", err)
				require.Contains(t, err.Error(), tc.errHas)
				require.NotContains(t, err.Error(), "from-file")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.flagged, c.SecretFlags)
			tc.check(t, c)
			r := c.Redacted()
			for _, v := range []string{r.ClusterSecret, r.AdminToken, r.WriteToken, r.ReadToken, r.EtcdPassword} {
				require.True(t, v == "" || v == "<redacted>", v)
			}
		})
	}
}

func TestRedactArgs(t *testing.T) {
	in := []string{"cairn", "--role", "storage", "--cluster-secret", "s1", "--admin-token=s2", "-read-token", "s3",
		"--write-token-file", "/etc/w", "--etcd-password", "s4", "--node-id", "n1"}
	out := RedactArgs(in)
	joined := strings.Join(out, " ")
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		require.NotContains(t, out, s)
		require.NotContains(t, joined, "="+s)
	}
	require.Contains(t, joined, "--write-token-file /etc/w", "a path is not a secret")
	require.Contains(t, joined, "--node-id n1")
	require.Equal(t, "s1", in[4], "the input is not modified")
}

func TestHelpRecommendsFileAndEnv(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	help := b.String()
	for _, s := range []string{"--cluster-secret-file FILE", "CAIRN_CLUSTER_SECRET", "--admin-token-file FILE", "--write-token-file",
		"--read-token-file", "--tls-cert FILE", "--tls-client-ca FILE", "prefer --cluster-secret-file or CAIRN_CLUSTER_SECRET"} {
		require.Contains(t, help, s)
	}
}
