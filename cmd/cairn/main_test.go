package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/config"
	"github.com/stretchr/testify/require"
)

func runArgs(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionFlagAndCommandAgree(t *testing.T) {
	code, byCmd, _ := runArgs("version")
	require.Equal(t, 0, code)
	code, byFlag, _ := runArgs("--version")
	require.Equal(t, 0, code)
	require.Equal(t, byCmd, byFlag)
	require.Regexp(t, `^cairn \S+\n$`, byFlag)
}

// TestSubcommandHelp: every command's --help exits 0 and is written like the
// main help: a description, "Usage:" with the synopsis, then "Flags:" with
// each flag, its meaning and its default on indented lines.
func TestSubcommandHelp(t *testing.T) {
	code, main, _ := runArgs("--help")
	require.Equal(t, 0, code)
	require.Contains(t, main, "\nUsage:\n  cairn [run]")
	for _, cmd := range [][]string{{"backup"}, {"restore"}, {"etcd-auth-setup"}, {"simulate"}, {"bench", "write"}, {"health"}, {"config", "init"}, {"version"}} {
		code, out, errOut := runArgs(append(cmd, "--help")...)
		name := strings.Join(cmd, " ")
		require.Equal(t, 0, code, name)
		require.Empty(t, errOut, name)
		require.Contains(t, out, "\nUsage:\n  cairn "+name, name)
		if name != "version" {
			require.Regexp(t, `\nFlags:\n  --[a-z-]+( [A-Z]+)?\n        \S.*\n        \((env CAIRN_[A-Z_]+; )?default: .+\)\n`, out, name)
			require.NotRegexp(t, `\n  -[a-z]`, out, "Go's flag style (single dash) in %s", name)
		}
		code, _, errOut = runArgs(append(cmd, "--no-such-flag")...)
		require.Equal(t, 2, code, name)
		require.Contains(t, errOut, "no-such-flag", name)
	}
}

func TestConfigInit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cairn.toml")
	code, _, errOut := runArgs("config", "init", "--out", path)
	require.Equal(t, 0, code, errOut)
	noEnv := func(string) (string, bool) { return "", false }
	got, err := config.Parse([]string{"--config", path}, noEnv, false, io.Discard)
	require.NoError(t, err)
	want, err := config.Parse(nil, noEnv, false, io.Discard)
	require.NoError(t, err)
	got.ConfigFile = ""
	require.Equal(t, want, got, "the written file parses to the defaults")

	require.NoError(t, os.WriteFile(path, []byte("# mine\n"), 0o644))
	code, _, errOut = runArgs("config", "init", "--out", path)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "file exists")
	data, _ := os.ReadFile(path)
	require.Equal(t, "# mine\n", string(data), "an existing file is never overwritten without --force")
	code, _, _ = runArgs("config", "init", "--out", path, "--force")
	require.Equal(t, 0, code)

	code, _, errOut = runArgs("config", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "init")
}

func TestHealthProbe(t *testing.T) {
	status := http.StatusOK
	body := `{"status":"ok","node_id":"n1"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/health", r.URL.Path)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, out, _ := runArgs("health", "--addr", addr)
	require.Equal(t, 0, code)
	require.Equal(t, "ok n1\n", out)

	status, body = http.StatusServiceUnavailable, `{"status":"starting"}`
	code, _, errOut := runArgs("health", "--addr", addr)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "503")

	srv.Close()
	code, _, _ = runArgs("health", "--addr", addr)
	require.Equal(t, 1, code, "nothing listening")
	code, _, errOut = runArgs("health", "--addr", "nonsense")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `"nonsense"`)
}

// etcd-auth-setup refuses bad input before it connects: no root password,
// an empty or missing password file, half a client certificate.
func TestEtcdAuthSetupBadInput(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for _, tc := range []struct {
		rootEnv string
		args    []string
		want    string
	}{
		{"", nil, "--etcd-root-password-file (or CAIRN_ETCD_ROOT_PASSWORD) is required"},
		{"", []string{"--etcd-root-password-file", empty}, `invalid --etcd-root-password-file "` + empty + `": the file is empty`},
		{"", []string{"--etcd-root-password-file", "/no/such/file"}, "--etcd-root-password-file"},
		{"pw", []string{"--etcd-cert", "c.pem"}, "--etcd-cert and --etcd-key must be given together"},
	} {
		t.Setenv("CAIRN_ETCD_ROOT_PASSWORD", tc.rootEnv)
		code, _, errOut := runArgs(append([]string{"etcd-auth-setup", "--etcd-endpoints", "http://127.0.0.1:1"}, tc.args...)...)
		require.Equal(t, 2, code, tc.args)
		require.Contains(t, errOut, tc.want, tc.args)
	}
}
