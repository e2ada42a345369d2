package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNewerDataFormatRefused: a data dir marked with a newer format (FORMAT)
// or holding a newer local state backup makes the node refuse to start:
// exit 1 and a message naming both versions, and the files left as they
// were. A data dir without the mark (release 0.1.0 wrote none) starts and
// is marked with this binary's format.
func TestNewerDataFormatRefused(t *testing.T) {
	standalone := func(t *testing.T, dir string) *Proc {
		return start(t, "--data-dir", dir, "--http-addr", freeAddr(t), "--etcd-listen-client-url", freeURL(t),
			"--etcd-listen-peer-url", freeURL(t), "--log-format", "json")
	}
	cases := []struct {
		file, content string
		names         []string
	}{
		{"FORMAT", `{"format":"cairn-data-dir","version":2}`, []string{"format version 2", "reads format version 1"}},
		{"state.backup", `{"format":"cairn-state-backup","version":99,"sources":{}}`, []string{"version 99", "versions 1 to 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o644))
			p := standalone(t, dir)
			require.Equal(t, 1, p.wait(30*time.Second), "a newer format must stop the node")
			out, err := os.ReadFile(p.log)
			require.NoError(t, err)
			for _, want := range tc.names {
				require.Contains(t, string(out), want)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tc.content, string(after), "nothing was changed")
		})
	}

	dir := t.TempDir()
	p := standalone(t, dir)
	p.waitStatus("/api/v1/ready", 200, 30*time.Second)
	mark, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
	require.NoError(t, err)
	require.Equal(t, `{"format":"cairn-data-dir","version":1}`, strings.TrimSpace(string(mark)))
	p.term()
}
