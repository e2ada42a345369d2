package query

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// points is how many points a window holds when there is one every 1,000
// ns in [0, 1e6].
func points(start, end int64) int {
	lo, hi := max(start, 0), min(end, 1_000_000)
	if lo > hi {
		return 0
	}
	return int(hi/1000 - (lo+999)/1000 + 1)
}

// TestPagerTiles: the windows cover the span exactly once, in order (or in
// reverse order), whatever the answers; an over-full window is read again
// narrower, and one nanosecond over-full is an error.
func TestPagerTiles(t *testing.T) {
	for _, c := range []struct {
		lo, hi int64
		desc   bool
	}{
		{0, 0, false},
		{-5, 1_000_000, false},
		{-5, 1_000_000, true},
		{math.MinInt64, math.MaxInt64, false},
		{math.MinInt64, math.MaxInt64, true},
	} {
		pg := NewPager(c.lo, c.hi, c.desc, 100)
		next := c.lo // the first time not yet read (desc: the last)
		if c.desc {
			next = c.hi
		}
		tooLarge := 0
		for start, end, ok := pg.Next(); ok; start, end, ok = pg.Next() {
			require.LessOrEqual(t, start, end)
			if c.desc {
				require.Equal(t, next, end)
			} else {
				require.Equal(t, next, start)
			}
			if tooLarge < 3 && uint64(end)-uint64(start) > 1000 {
				tooLarge++
				require.NoError(t, pg.TooLarge())
				s2, e2, _ := pg.Next()
				require.Less(t, uint64(e2)-uint64(s2), uint64(end)-uint64(start), "narrower")
				continue
			}
			pg.Done(points(start, end))
			if c.desc {
				next = start - 1
				if start == c.lo {
					break
				}
			} else {
				next = end + 1
				if end == c.hi {
					break
				}
			}
		}
		_, _, ok := pg.Next()
		require.False(t, ok, "the span is read")
	}

	pg := NewPager(7, 7, false, 10)
	require.ErrorIs(t, pg.TooLarge(), ErrTooLarge)
}
