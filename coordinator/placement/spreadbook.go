package placement

import "slices"

// A node given more replicas of a database than it holds must take them
// from shards that lack one (a dead node's), or else a move follows: a shard
// it holds already cannot take it again, so another shard's replica must be
// moved to make room. targets and balanceTargets therefore book such a shard
// for every node they raise above what it holds, and prefer nodes that can
// book one; only when none can is the count given at the cost of a move.

// bookBase starts d's bookings: every node whose share rounded down is more
// than it holds books what it lacks (it has no choice).
func (sp *spreadPlanner) bookBase(d *spreadDB) {
	d.miss, d.booked, d.lacks = make([]int, len(d.shards)), map[int32][]int{}, 0
	for i := range d.shards {
		s := &d.shards[i]
		d.miss[i] = max(0, s.want-len(s.orig))
		d.lacks += d.miss[i]
	}
	for v := range int32(len(sp.ids)) {
		for range d.base[v] - d.held[v] {
			sp.book(d, v)
		}
	}
}

// bookable is a shard of d lacking a replica that v may take (it does not
// hold it and its domain has room for it), or -1. With nothing lacking,
// every node may take what another sheds: 0.
func (sp *spreadPlanner) bookable(d *spreadDB, v int32) int {
	if d.lacks == 0 {
		return 0
	}
	for i := range d.shards {
		s := &d.shards[i]
		if d.miss[i] > 0 && !slices.Contains(s.orig, v) &&
			sp.inDomain(s.orig, sp.dom[v]) < sp.domainCaps(s.want)[sp.dom[v]] {
			return i
		}
	}
	return -1
}

// book reserves one lacking replica of d for v; false if none fits.
func (sp *spreadPlanner) book(d *spreadDB, v int32) bool {
	if d.lacks == 0 {
		return true
	}
	i := sp.bookable(d, v)
	if i < 0 {
		return false
	}
	d.miss[i]--
	d.booked[v] = append(d.booked[v], i)
	return true
}

// unbook releases one of v's bookings in d, if it has one.
func (sp *spreadPlanner) unbook(d *spreadDB, v int32) {
	if l := d.booked[v]; len(l) > 0 {
		d.miss[l[len(l)-1]]++
		d.booked[v] = l[:len(l)-1]
	}
}

// pickPlus gives d's rounded-up counts to the candidates in their order:
// first to those that hold that many or can book a lacking replica, then to
// any; it returns the counts left without a node.
func (sp *spreadPlanner) pickPlus(d *spreadDB, cand []int32, slots int) int {
	for pass := range 2 {
		for _, v := range cand {
			if slots == 0 || d.plus[v] || d.budget[sp.dom[v]] <= 0 {
				continue
			}
			if pass == 0 && d.held[v] <= d.base[v] && !sp.book(d, v) {
				continue
			}
			d.plus[v] = true
			d.budget[sp.dom[v]]--
			slots--
		}
	}
	return slots
}
