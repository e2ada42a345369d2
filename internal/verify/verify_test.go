package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Each invariant passes what holds, panics on a violation in verify mode
// with the values that broke it, and checks nothing when the mode is off.
func TestViolationsPanicInVerifyMode(t *testing.T) {
	t.Setenv(Env, "1")
	require.NotPanics(t, func() { ShardTerm("db/0", "n1", 3, "n2", 4) })
	require.NotPanics(t, func() { ShardTerm("db/0", "n1", 3, "n1", 3) })
	require.NotPanics(t, func() { LeaderInSync("db/0", "n1", 3, []string{"n2", "n1"}) })
	require.PanicsWithValue(t, "cairn invariant violated: shard db/0: term went down from 4 to 3",
		func() { ShardTerm("db/0", "n1", 4, "n1", 3) })
	require.PanicsWithValue(t, "cairn invariant violated: shard db/0: term 4 has two leaders, n1 and n2",
		func() { ShardTerm("db/0", "n1", 4, "n2", 4) })
	require.PanicsWithValue(t, "cairn invariant violated: shard db/0: the in-sync set [n2 n3] of term 4 does not hold its leader n1",
		func() { LeaderInSync("db/0", "n1", 4, []string{"n2", "n3"}) })

	t.Setenv(Env, "")
	require.NotPanics(t, func() { ShardTerm("db/0", "n1", 4, "n2", 4) })
	require.NotPanics(t, func() { LeaderInSync("db/0", "n1", 4, nil) })
}
