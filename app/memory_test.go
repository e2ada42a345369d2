package app

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
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

// TestGCPercent: the highest percent up to 200, in steps of 20, whose heap
// goal stays within the room (an empty node's derived limit), never under
// 100.
func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	const room = 704 * mib // 64 MiB memtables, 64 MiB writes in flight
	cases := []struct {
		name string
		live int64
		want int
	}{
		{"no collection yet: the most", 0, 200},
		{"40k series: the most", 150 * mib, 200},
		{"the goal at 200 exactly the room", room / 3, 200},
		{"just past it: the step below", room/3 + 1, 180},
		{"room for 150 %: rounded down to 140", room * 2 / 5, 140},
		{"the goal at 120 just past the room: the default", room/2 - mib, 100},
		{"a million series: the default", 450 * mib, 100},
		{"a heap past the room: never under the default", 800 * mib, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := gcPercent(tc.live, room)
			require.Equal(t, tc.want, p)
			if p > 100 {
				require.LessOrEqual(t, tc.live*int64(100+p)/100, int64(room), "the goal within the room")
			}
		})
	}
}

// TestGovernorFollowsHeadroom: through the governor, a node whose series
// indexes and live heap grow gets a high GC percent while its heap is a
// small part of an empty node's limit and 100 once it fills it (its own
// limit growing with the indexes meanwhile); with GOGC set it never sets a
// percent.
func TestGovernorFollowsHeadroom(t *testing.T) {
	const mib = 1 << 20
	const budget, writes = 64 * mib, 64 * mib
	run := func(tune bool) (percents []int, limits []int64) {
		g := newGovernor(budget, writes, tune, zap.NewNop())
		var live int64
		g.liveHeap = func() int64 { return live }
		g.setPercent = func(p int) { percents = append(percents, p) }
		g.setLimit = func(n int64) { limits = append(limits, n) }
		// The live heap: 100 MiB besides twice the indexes (theirs
		// and the memtables' room for each series).
		for _, index := range []int64{0, 70 * mib, 90 * mib, 120 * mib, 170 * mib, 170 * mib} {
			live = 100*mib + 2*index
			g.look(engine.MemoryUse{Index: index})
		}
		return percents, limits
	}
	percents, limits := run(true)
	// Live 100, 240, 280, 340, 440 MiB against 704 MiB of room.
	require.Equal(t, []int{200, 180, 140, 100}, percents)
	require.Equal(t, []int64{
		derivedLimit(budget, writes, engine.MemoryUse{Index: 70 * mib}),
		derivedLimit(budget, writes, engine.MemoryUse{Index: 90 * mib}),
		derivedLimit(budget, writes, engine.MemoryUse{Index: 120 * mib}),
		derivedLimit(budget, writes, engine.MemoryUse{Index: 170 * mib}),
	}, limits)
	percents, limits2 := run(false)
	require.Empty(t, percents, "GOGC set: the user's percent")
	require.Equal(t, limits, limits2, "the limit follows the indexes either way")
}
