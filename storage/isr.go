package storage

import (
	"slices"
	"time"
)

// isrView is what the in-sync set decision looks at: the leader's bookkeeping
// of its followers and the cluster's live nodes, at one instant.
type isrView struct {
	self     string
	isr      []string // the current in-sync set (self included)
	replicas []string // the shard's assigned replicas
	last     uint64   // the leader's last txn id
	// committed is the highest txn id acknowledged to a writer in this
	// leadership (at least the log's last when it began): every member of
	// the set must hold it, or the master could hand the shard to a replica
	// without acknowledged entries, and the others would truncate them.
	committed uint64
	acked     map[string]uint64
	caught    map[string]time.Time // when each follower last had all we had at its previous fetch
	fetched   map[string]time.Time // when each follower last fetched
	parked    map[string]int       // followers with a batched fetch parked at the leader now: fetching
	sent      map[string]uint64    // the followers that fetched in this leadership (our last txn then)
	live      func(node string) bool
	window    time.Duration // the catch-up window (lag bound)
}

// decideISR says which followers leave and which join the in-sync set at now.
// A follower leaves when it left the assignment, when its lease is gone (not
// live), when it has not fetched for the window (a dead or frozen process
// whose lease still runs: this is what catches it with no writes arriving),
// or when it has stopped catching up for the window; a follower that has not
// fetched yet in this leadership of a shard whose log is empty stays until it
// does, or until an entry it lacks has waited the window. A follower whose batched
// fetch is parked at the leader is fetching now, and caught up now when it
// has confirmed our last entry. A follower joins when it
// is live, assigned and caught up within half the window, and holds every
// acknowledged entry (acked >= committed); one that is caught up but lacks
// some is returned in join instead: acknowledgements wait for it (so the
// acknowledged entries stop running ahead of it) until it holds them all.
// Being caught up alone is not enough: a follower restarted after kill -9
// fetches from where it was at its previous fetch, which the leader counts
// as caught up although entries were acknowledged without it meanwhile.
func decideISR(now time.Time, v isrView) (drop, add, join []string) {
	for _, n := range v.isr {
		if n == v.self {
			continue
		}
		switch {
		case !slices.Contains(v.replicas, n), !v.live(n):
			drop = append(drop, n)
		case v.parked[n] == 0 && now.Sub(v.fetched[n]) > v.window && !awaited(v, n):
			drop = append(drop, n)
		case v.acked[n] < v.last && now.Sub(v.caught[n]) > v.window:
			drop = append(drop, n)
		}
	}
	for _, n := range v.replicas {
		if n == v.self || slices.Contains(v.isr, n) || !v.live(n) {
			continue
		}
		c := v.caught[n]
		if v.parked[n] > 0 && v.acked[n] >= v.last {
			// Parked here with everything we have (an append would have
			// woken it): caught up now. An idle poll parks for up to
			// maxFetchWait, and a follower back from a lease blip waited
			// that long to rejoin, the set being us alone meanwhile.
			c = now
		}
		if !c.IsZero() && now.Sub(c) < v.window/2 && (v.parked[n] > 0 || now.Sub(v.fetched[n]) < v.window/2) {
			if v.acked[n] >= v.committed {
				add = append(add, n)
			} else {
				join = append(join, n)
			}
		}
	}
	return drop, add, join
}

// awaited: member n of a new shard's set, which holds nothing it could lack
// (our log is empty), has not fetched in this leadership yet. It stays in
// the set: dropping it bought nothing and cost two fenced set writes (the
// drop and, once it fetched, the add), and at 1,000 simulated nodes a
// database's followers often take up their roles more than a lag bound
// after its leaders (the agents' process is busy placing the others), so
// placement wrote thousands of sets that changed nothing in the end. Once
// an entry is appended, the catch-up rule drops it within the window of
// the leadership's start if it still has not come.
func awaited(v isrView, n string) bool {
	_, fetched := v.sent[n]
	return v.last == 0 && !fetched
}

// upkeepDelay is when the leader looks at its in-sync set again: soon while
// something may be due (a live follower out of the set, a member lagging or
// not parked at us, or not assigned any more), else after quietUpkeep. A
// quiet set changes only through events that wake the upkeep at once: a
// parked fetch ending (park), an assignment change (setDesired). A replica
// that is not live (or cannot take writes) stays out of the set until it
// is back and fetching, and its fetches, parked at us, wake the upkeep:
// waiting for it at a quarter of the lag bound kept every leader of a
// shard with a replica in a dead failure domain looking four times a
// second for as long as the domain was down (32,000 leaderships at 300
// simulated nodes: the agents' process had thousands of upkeeps runnable
// at once, and the new leaders' first in-sync sets waited behind them).
// After a write of the set failed, it is the back-off's (maintainISR).
func (r *replica) upkeepDelay() time.Duration {
	last := r.eng.LastTxnID()
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.ls.wait; w > 0 {
		r.ls.wait = 0 // the upkeep after a failed write: backed off
		return w
	}
	quiet := !r.ls.fenced
	for _, n := range r.ls.isr {
		if n != r.h.nodeID && (r.ls.parked[n] == 0 || r.ls.acked[n] < last || !slices.Contains(r.want.replicas, n)) {
			quiet = false
		}
	}
	for _, n := range r.want.replicas {
		if !slices.Contains(r.ls.isr, n) && r.h.peerCanSync(n) {
			quiet = false
		}
	}
	if quiet {
		return quietUpkeep * r.h.cfg.LagBound
	}
	return r.h.cfg.LagBound / 4
}

// quietUpkeep (times the lag bound) spaces the upkeep of a quiet set.
const quietUpkeep = 8
