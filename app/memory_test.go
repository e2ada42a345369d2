package app

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	none := func(string) string { return "" }
	gomem := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	}
	storage := config.Default()
	storage.MemtableMaxBytes = 64 << 20
	storage.WriteMaxInflightBytes = 32 << 20
	broker := config.Default()
	broker.Roles = []string{config.RoleBroker}
	explicit := storage
	explicit.MemoryLimit = 300 << 20
	cases := []struct {
		name   string
		cfg    config.Config
		getenv func(string) string
		want   int64
	}{
		{"storage: three times the memtable budget + 128 MiB + six times the writes in flight", storage, none, 512 << 20},
		{"GOMEMLIMIT set: the runtime's", storage, gomem, 0},
		{"no storage role: none", broker, none, 0},
		{"the flag wins", explicit, gomem, 300 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, derived := memoryLimit(tc.cfg, tc.getenv)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want == 512<<20, derived, "only the storage default follows the index")
		})
	}
	auto := config.Default()
	got, _ := memoryLimit(auto, none)
	require.Greater(t, got, 128<<20+6*auto.InflightWriteBytes(), "the memtable and in-flight defaults are resolved")
}

// TestDerivedLimitFollowsIndex: a storage node's derived soft limit keeps
// room above its series indexes (twice them) besides three times what the
// active memtables may hold (the budget plus the indexes), 128 MiB and
// what the writes in flight hold (six times their bodies), so that a node
// holding a million series, or taking many senders' batches, is not held
// under a limit its live heap passes.
func TestDerivedLimitFollowsIndex(t *testing.T) {
	const budget, writes = 64 << 20, 64 << 20
	require.Equal(t, int64(320<<20), derivedLimit(budget, 0, engine.MemoryUse{}))
	require.Equal(t, int64(320<<20+6*writes), derivedLimit(budget, writes, engine.MemoryUse{}))
	big := engine.MemoryUse{Memtables: budget + 400<<20, Frozen: budget + 400<<20, Index: 400 << 20}
	got := derivedLimit(budget, writes, big)
	require.Equal(t, int64(320<<20+5*400<<20+6*writes), got)
	live := big.Memtables + big.Frozen + big.Index
	require.GreaterOrEqual(t, got, 2*live-big.Memtables-big.Frozen, "room for as much garbage as the index and the budget")
}

// TestGovernWaitBacksOffOnlyWhileIndexesStay: the governor looks each
// second while the series indexes grow and backs off to 8 s while they
// stay; the first growth it sees brings it back to each second.
func TestGovernWaitBacksOffOnlyWhileIndexesStay(t *testing.T) {
	var waits []time.Duration
	wait := governEvery
	for _, moved := range []bool{true, false, false, false, false, false, true, true, false} {
		wait = governWait(wait, moved)
		waits = append(waits, wait)
	}
	s := time.Second
	require.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, 8 * s, s, s, 2 * s}, waits)
}
