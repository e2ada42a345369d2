package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func seriesKeys(t *testing.T, s Shard) []string {
	t.Helper()
	var keys []string
	require.NoError(t, s.SeriesKeys(func(k string) error {
		keys = append(keys, k)
		return nil
	}))
	slices.Sort(keys)
	return keys
}

// TestSeriesKeys: every series once, whether flushed or still in the
// memtable (or both), and a visit error ends the walk.
func TestSeriesKeys(t *testing.T) {
	// A three-point flush threshold flushes the first batch; the second stays
	// in the memtable and touches a flushed series again.
	_, s := openShard1(t, WithFlushPoints(3), WithFlushInterval(0))
	apply(t, s, 1, pt("cpu", "host=a", "value", 1, 1), pt("cpu", "host=b", "idle", 1, 2), pt("mem", "", "used", 1, 3))
	apply(t, s, 1, pt("cpu", "host=a", "value", 2, 4), pt("disk", "path=/x#y", "free", 2, 5))
	want := []string{"cpu,host=a#value", "cpu,host=b#idle", `disk,path=/x\#y#free`, "mem#used"}
	require.Equal(t, want, seriesKeys(t, s))

	stop := errors.New("stop")
	n := 0
	err := s.SeriesKeys(func(string) error {
		n++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)
}
