package query

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSampleAndDistinct: sample keeps n of an interval's rows, each once,
// in time order (all of them when there are no more), distinct each value
// once at the interval's start, by first time then value.
func TestSampleAndDistinct(t *testing.T) {
	var rows [][]any
	for i := range 1000 {
		rows = append(rows, []any{int64(i), float64(i % 7)})
	}
	for range 20 {
		got := sample(rows, 10)
		require.Len(t, got, 10)
		for i := 1; i < len(got); i++ {
			require.Less(t, got[i-1][0].(int64), got[i][0].(int64), "time order, no row twice")
		}
	}
	require.Equal(t, rows[:5], sample(rows[:5], 10))

	got := distinct([][]any{{int64(5), "b"}, {int64(5), "a"}, {int64(6), "b"}, {int64(7), nil}, {int64(8), "c"}}, 0)
	require.Equal(t, [][]any{{int64(0), "a"}, {int64(0), "b"}, {int64(0), "c"}}, got)
	require.Equal(t, -1, compareValues(false, true))
	require.Equal(t, 1, compareValues(uint64(3), uint64(2)))
	require.Equal(t, -1, compareValues(int64(-3), int64(2)))
}
