package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueryLimited: a query over its series or points limit fails with
// ErrTooLarge naming the limit, both from the memtable and from flushed
// series; at the limit it answers in full.
func TestQueryLimited(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"memtable", nil},
		{"flushed", []Option{WithFlushPoints(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := openShard1(t, tc.opts...)
			// 10 series of 5 points each.
			for h := range 10 {
				for ts := range 5 {
					apply(t, s, 1, pt("cpu", fmt.Sprintf("host=h%02d", h), "value", int64(ts), float64(ts)))
				}
			}
			got, err := s.QueryLimited("cpu", nil, 0, 100, Limits{MaxSeries: 10, MaxPoints: 50})
			require.NoError(t, err)
			require.Len(t, got, 10)

			_, err = s.QueryLimited("cpu", nil, 0, 100, Limits{MaxSeries: 9})
			require.ErrorIs(t, err, ErrTooLarge)
			require.Contains(t, err.Error(), "more than 9 series")

			_, err = s.QueryLimited("cpu", nil, 0, 100, Limits{MaxPoints: 49})
			require.ErrorIs(t, err, ErrTooLarge)
			require.Contains(t, err.Error(), "more than 49 points")

			// One series alone over the points limit: stopped inside it.
			_, err = s.QueryLimited("cpu", map[string]string{"host": "h03"}, 0, 100, Limits{MaxPoints: 3})
			require.ErrorIs(t, err, ErrTooLarge)

			// Narrowed by tag or time, it fits.
			got, err = s.QueryLimited("cpu", map[string]string{"host": "h03"}, 0, 2, Limits{MaxSeries: 1, MaxPoints: 3})
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Len(t, got[0].Points, 3)
		})
	}
}
