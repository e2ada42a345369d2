package storage

import (
	"math"
	"slices"
	"time"
)

// trimFloor is how far the leader's log may be trimmed (once flushed) for
// its followers: to the lowest txn acknowledged by a follower that may still
// fetch from it, an in-sync one or one fetching now (catching up to join).
// Others are not waited for: they come back through a snapshot. No such
// follower: everything may go (MaxUint64). The engine's retention bounds
// cap what a slow follower can keep.
func trimFloor(now time.Time, v isrView) uint64 {
	// Called at every fetch and upkeep pass: no allocation (the sets are a
	// few nodes each).
	floor := uint64(math.MaxUint64)
	for _, n := range v.isr {
		if n != v.self {
			floor = min(floor, v.acked[n])
		}
	}
	for _, n := range v.replicas {
		if n == v.self || slices.Contains(v.isr, n) {
			continue
		}
		if v.parked[n] > 0 || (!v.fetched[n].IsZero() && now.Sub(v.fetched[n]) <= v.window) {
			floor = min(floor, v.acked[n])
		}
	}
	return floor
}
