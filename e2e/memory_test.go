package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMemoryLimitFlag: the binary sets Go's soft memory limit from
// --memory-limit, and on a storage node without it from the memtable
// budget (3x + 128 MiB) and the write bodies it takes at once (6x: parsed,
// they are live heap too), as go_gc_gomemlimit_bytes reports.
func TestMemoryLimitFlag(t *testing.T) {
	explicit := start(t, append(standaloneArgs(t), "--memory-limit", "300000000")...)
	derived := start(t, append(standaloneArgs(t), "--memtable-max-bytes", "33554432", "--write-max-inflight-bytes", "50000000")...)
	for _, tc := range []struct {
		p    *Proc
		want float64
	}{{explicit, 300000000}, {derived, 3*33554432 + 128<<20 + 6*50000000}} {
		tc.p.waitStatus("/api/v1/health", 200, 10*time.Second)
		require.Equal(t, tc.want, metric(t, tc.p, "go_gc_gomemlimit_bytes"), tc.p.name)
	}
}
