package engine

import (
	"errors"
	"fmt"
)

// MaxSeriesKeyBytes is the longest series key a shard accepts. The index
// keys a series makes (a posting key holds its metric, a tag key and the
// tag's value) must stay under bbolt's 32 KiB key limit: a key over it
// fails every flush of the memtable holding it, and so every later write
// to the shard. Append refuses an entry holding a longer one
// (ErrKeyTooLarge); the write path refuses such a line long before
// (lineproto.Limits).
const MaxSeriesKeyBytes = 32<<10 - 512

// ErrKeyTooLarge: an entry holds a series key over MaxSeriesKeyBytes.
var ErrKeyTooLarge = errors.New("engine: series key too large")

// ErrTooLarge: a query matched more series or points than its limits allow.
// The read stops as soon as it is over, so the answer never sits in memory.
var ErrTooLarge = errors.New("engine: query result over its limit")

// Limits bound one query's answer; zero fields mean no bound.
type Limits struct {
	MaxSeries int
	MaxPoints int
}

// budget counts a query's answer against its limits while it is read.
type budget struct {
	lim            Limits
	series, points int
}

// add counts one more series with n points and fails once over a limit.
func (b *budget) add(n int) error {
	b.series++
	b.points += n
	return b.check()
}

func (b *budget) check() error {
	if b.lim.MaxSeries > 0 && b.series > b.lim.MaxSeries {
		return fmt.Errorf("%w: more than %d series match", ErrTooLarge, b.lim.MaxSeries)
	}
	if b.lim.MaxPoints > 0 && b.points > b.lim.MaxPoints {
		return b.overPoints()
	}
	return nil
}

func (b *budget) overPoints() error {
	return fmt.Errorf("%w: more than %d points match", ErrTooLarge, b.lim.MaxPoints)
}

// room is how many more points fit (-1: no bound).
func (b *budget) room() int {
	if b.lim.MaxPoints <= 0 {
		return -1
	}
	return max(b.lim.MaxPoints-b.points, 0)
}

// Tighter is the stricter of two limits, field by field (zero: no bound).
func (l Limits) Tighter(o Limits) Limits {
	return Limits{MaxSeries: tighter(l.MaxSeries, o.MaxSeries), MaxPoints: tighter(l.MaxPoints, o.MaxPoints)}
}

func tighter(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}
