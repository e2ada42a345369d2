package query

import (
	"fmt"
	"math"
)

// Pager lays out the time windows of a streamed select over [lo, hi]: the
// caller reads the window Next names, then reports its points (Done) or
// that a shard had more than a page (TooLarge). A window is sized so its
// points come near target, from the density of the windows before: a
// sparse stretch widens the next window up to 4 times, a dense one narrows
// it; an over-full window is read again at a quarter of its width.
type Pager struct {
	lo, hi int64 // what is left to read, inclusive
	desc   bool  // read from hi down
	width  uint64
	target int
	done   bool
}

// NewPager starts a pager over [lo, hi] (lo <= hi) whose pages hold about
// target points; windows start at 1/256 of the span.
func NewPager(lo, hi int64, desc bool, target int) *Pager {
	span := uint64(hi) - uint64(lo)
	return &Pager{lo: lo, hi: hi, desc: desc, width: span/256 + 1, target: max(target, 1)}
}

// Next is the window to read; ok false once the span is read.
func (pg *Pager) Next() (start, end int64, ok bool) {
	if pg.done {
		return 0, 0, false
	}
	left := uint64(pg.hi) - uint64(pg.lo) // width - 1 of what is left
	if pg.width-1 >= left {
		return pg.lo, pg.hi, true
	}
	if pg.desc {
		return int64(uint64(pg.hi) - (pg.width - 1)), pg.hi, true
	}
	return pg.lo, int64(uint64(pg.lo) + pg.width - 1), true
}

// Done records that the window Next named held n points.
func (pg *Pager) Done(n int) {
	start, end, _ := pg.Next()
	switch {
	case start == pg.lo && end == pg.hi:
		pg.done = true
	case pg.desc:
		pg.hi = start - 1
	default:
		pg.lo = end + 1
	}
	grow := 4.0
	if n > 0 {
		grow = math.Min(4, math.Max(0.25, float64(pg.target)/float64(n)))
	}
	pg.width = uint64(math.Max(1, math.Min(float64(pg.width)*grow, 1<<62)))
}

// TooLarge records that a shard had more than a page in the window Next
// named: it is read again narrower. A window of one nanosecond that is too
// large is an error: that many points share a time.
func (pg *Pager) TooLarge() error {
	if pg.width == 1 {
		return fmt.Errorf("%w: more than a page of points at one time; narrow the series (WHERE)", ErrTooLarge)
	}
	pg.width = max(pg.width/4, 1)
	return nil
}
