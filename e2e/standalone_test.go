package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// standaloneArgs are the flags of a standalone node on free ports.
func standaloneArgs(t testing.TB) []string {
	return []string{"--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
		"--etcd-listen-client-url", freeURL(t), "--etcd-listen-peer-url", freeURL(t), "--log-format", "json"}
}

// TestStandalone: the default role answers, elects itself and stops cleanly
// in under 2 s (the foundation issue's shutdown contract).
func TestStandalone(t *testing.T) {
	begin := time.Now()
	p := start(t, standaloneArgs(t)...)
	health := p.waitStatus("/api/v1/health", 200, 10*time.Second)
	t.Logf("health answered %s after start", time.Since(begin))
	require.Equal(t, "ok", health["status"])
	id, _ := health["node_id"].(string)
	require.NotEmpty(t, id)
	require.ElementsMatch(t, []any{"etcd", "master", "broker", "storage"}, health["roles"])

	var master map[string]any
	require.Eventually(t, func() bool {
		var code int
		code, master = p.get("/api/v1/master")
		return code == 200 && master["node_id"] == id
	}, 10*time.Second-time.Since(begin), 20*time.Millisecond, "master never named this node: %v", master)
	require.Equal(t, p.addr, master["address"])
	require.Greater(t, master["term"], 0.0)
	require.Eventually(t, func() bool {
		_, h := p.get("/api/v1/health")
		return h["is_master"] == true
	}, 5*time.Second, 20*time.Millisecond)
	p.waitStatus("/api/v1/ready", 200, 5*time.Second)

	took := p.term()
	t.Logf("SIGTERM to exit: %s", took)
	require.Less(t, took, 2*time.Second, "shutdown must take under 2 s")
}

// runCLI runs cairn to completion and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "cairn %v did not exit; stderr: %s", args, errOut.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errOut.String()
}

// TestBadInput: every bad flag or config exits 2 naming the bad value, before
// the node starts anything.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		args []string
		bad  string // must appear on stderr
	}{
		{"unknown role", []string{"--role", "master,chef"}, "chef"},
		{"bad duration", []string{"--lease-ttl", "abc"}, "abc"},
		{"lease below 2s", []string{"--lease-ttl", "1500ms"}, "1500ms"},
		{"bad address", []string{"--http-addr", "nonsense"}, "nonsense"},
		{"unreadable config", []string{"--config", "/nonexistent.toml"}, "/nonexistent.toml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Valid defaults for everything else, so only the bad value can
			// be the reason for the exit, and nothing binds a fixed port.
			args := append([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--http-addr", freeAddr(t),
				"--etcd-listen-client-url", freeURL(t), "--etcd-listen-peer-url", freeURL(t)}, tc.args...)
			code, _, stderr := runCLI(t, args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.bad)
		})
	}
	t.Run("version", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runCLI(t, "version")
		require.Equal(t, 0, code, "stderr: %s", stderr)
		require.Contains(t, stdout, "cairn")
	})
	t.Run("unknown command", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, "bogus")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "bogus")
	})
}
