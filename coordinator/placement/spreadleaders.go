package placement

import (
	"maps"
	"math"
	"slices"
)

// leaders picks every shard's leader among its target replicas: a node of
// a database leads in proportion to the replicas of it that it holds,
// rounded down or up, and likewise over all databases. A current leader that
// stays a replica keeps leading while its node is under its ceiling.
func (sp *spreadPlanner) leaders() {
	dbs := sp.dbs
	for _, d := range dbs {
		// The total's share follows the unrounded replica shares, so the
		// roundings of many databases do not add up on one node.
		for v := range sp.ids {
			sp.leadIdl[v] += float64(len(d.shards)) * d.x[v] / float64(d.total)
		}
		hi := func(v int32) int { return d.leadHi(v) }
		for i := range d.shards {
			s := &d.shards[i]
			if v, ok := sp.idx[s.curLeader]; ok && slices.Contains(s.tgt, v) && d.leads[v] < hi(v) {
				sp.setLeader(d, s, v)
			}
		}
		for i := range d.shards {
			s := &d.shards[i]
			if v := s.pref; s.leader < 0 && v >= 0 && slices.Contains(s.tgt, v) && d.leads[v] < hi(v) {
				sp.setLeader(d, s, v)
			}
		}
		for i := range d.shards {
			s := &d.shards[i]
			if s.leader >= 0 {
				continue
			}
			// Under its ceiling first, then furthest below its total share,
			// then a replica that has the data already.
			best := int32(-1)
			var bestKey [3]float64
			for _, v := range s.tgt {
				key := [3]float64{0, float64(sp.lead[v]) - sp.leadIdl[v], 1}
				if d.leads[v] >= hi(v) {
					key[0] = 1
				}
				if slices.Contains(s.orig, v) {
					key[2] = 0
				}
				if best < 0 || slices.Compare(key[:], bestKey[:]) < 0 {
					best, bestKey = v, key
				}
			}
			sp.setLeader(d, s, best)
		}
		one := []*spreadDB{d}
		sp.level(one, false, func(v int32) int { return d.leads[v] }, d.leadLo, d.leadHi)
	}
	sp.level(dbs, true, func(v int32) int { return sp.lead[v] },
		func(v int32) int { return int(math.Floor(sp.leadIdl[v] + eps)) },
		func(v int32) int { return int(math.Ceil(sp.leadIdl[v] - eps)) })
}

// level brings every node's count (of leaderships in dbs) within [lo, hi]
// by chains of hand-overs, where such chains exist: first off each node
// above its ceiling onto nodes below theirs (a search forward from it),
// then onto the nodes below their floor from nodes above theirs, by one
// search back from all those below at once (pull): a phase ends with the
// first search that finds none, so a node no chain reaches costs nothing
// more. That phase used to search from every leading node for each node
// below its floor, nearly all in vain when the totals of a large cluster
// were uneven: O(nodes x nodes x shards of dbs) per batch.
func (sp *spreadPlanner) level(dbs []*spreadDB, bounded bool, count func(int32) int, lo, hi func(int32) int) {
	led := indexLeaders(dbs)
	on := replicasOf(dbs)
	nodes := slices.Sorted(maps.Keys(on))
	for _, v := range nodes {
		for count(v) > hi(v) && sp.shift(v, led, bounded, func(y int32) bool { return count(y) < hi(y) }) {
		}
	}
	for sp.pull(led, on, nodes, bounded, func(x int32) bool { return count(x) > lo(x) }, func(y int32) bool { return count(y) < lo(y) }) {
	}
}

// ledRef is one shard of the databases being leveled; pos is its place in
// their order (database, then shard).
type ledRef struct {
	d   *spreadDB
	s   *sshard
	pos int
}

// leaderIndex is the shards of the databases being leveled by their
// leader, each node's in their order: built once per level and kept up to
// date by shift, which used to rebuild it for every hand-over chain (a
// cluster-wide leveling after a thousand nodes' leases came back was
// O(moves x every shard): 5 s of a 20 s profile at 1,000 nodes).
type leaderIndex map[int32][]ledRef

func indexLeaders(dbs []*spreadDB) leaderIndex {
	led := leaderIndex{}
	pos := 0
	for _, d := range dbs {
		for i := range d.shards {
			s := &d.shards[i]
			led[s.leader] = append(led[s.leader], ledRef{d, s, pos})
			pos++
		}
	}
	return led
}

// replicasOf are the shards of dbs by replica, in the order of the
// databases and their shards: the only nodes that lead one of them now or
// after any hand-over.
func replicasOf(dbs []*spreadDB) map[int32][]ledRef {
	on := map[int32][]ledRef{}
	pos := 0
	for _, d := range dbs {
		for i := range d.shards {
			s := &d.shards[i]
			for _, v := range s.tgt {
				on[v] = append(on[v], ledRef{d, s, pos})
			}
			pos++
		}
	}
	return on
}

// move notes that r's shard is now led by to (it was led by from).
func (led leaderIndex) move(r ledRef, from, to int32) {
	refs := led[from]
	if i := slices.IndexFunc(refs, func(x ledRef) bool { return x.s == r.s }); i >= 0 {
		led[from] = slices.Delete(refs, i, i+1)
	}
	dst := led[to]
	i, _ := slices.BinarySearchFunc(dst, r.pos, func(x ledRef, pos int) int { return x.pos - pos })
	led[to] = slices.Insert(dst, i, r)
}

// shift moves one leadership off start along a shortest chain of hand-overs (each passes a shard of the leveled
// databases, led as indexed in led, from its leader to another of its
// replicas) to a node accepted by to. bounded keeps every node's count of
// each database within its bounds: a node in the middle of the chain that
// receives and gives in one database keeps its count there.
func (sp *spreadPlanner) shift(start int32, led leaderIndex, bounded bool, to func(int32) bool) bool {
	sp.search++
	if sp.hops == nil {
		sp.hops = make([]hop, len(sp.ids))
	}
	seen := func(x int32) bool { return sp.hops[x].search == sp.search }
	canGive := func(x int32, d *spreadDB) bool {
		h := sp.hops[x]
		if !bounded || (!h.start && h.via.d == d) {
			return true
		}
		return d.leads[x]-1 >= d.leadLo(x) && (h.start || h.via.d.leads[x]+1 <= h.via.d.leadHi(x))
	}
	sp.hops[start] = hop{search: sp.search, start: true}
	queue := []int32{start}
	for head := 0; head < len(queue); head++ {
		x := queue[head]
		for _, r := range led[x] {
			sp.looked++
			if !canGive(x, r.d) {
				continue
			}
			for _, y := range r.s.tgt {
				if seen(y) {
					continue
				}
				sp.hops[y] = hop{search: sp.search, via: r, from: x}
				if to(y) && (!bounded || r.d.leads[y]+1 <= r.d.leadHi(y)) {
					for z := y; !sp.hops[z].start; z = sp.hops[z].from {
						h := sp.hops[z]
						led.move(h.via, h.from, z)
						sp.moveLeader(h.via.d, h.via.s, z)
					}
					return true
				}
				queue = append(queue, y)
			}
		}
	}
	return false
}

// pull is shift searched backwards: from every node of ends (the replicas
// of led's shards) accepted by to at once, over the shards each node is a
// replica of (on) back to their leaders, until one is accepted by from. One
// search answers for every node short of leaderships, and costs the chains
// to them, not those from the many nodes that have some to spare.
func (sp *spreadPlanner) pull(led leaderIndex, on map[int32][]ledRef, ends []int32, bounded bool, from, to func(int32) bool) bool {
	sp.search++
	if sp.hops == nil {
		sp.hops = make([]hop, len(sp.ids))
	}
	// Whether y may receive a shard of d: as an end, within its bound of
	// d; in the middle of the chain, as shift's canGive sees it.
	canTake := func(y int32, d *spreadDB) bool {
		h := sp.hops[y]
		if !bounded || (!h.start && h.via.d == d) {
			return true
		}
		if h.start {
			return d.leads[y]+1 <= d.leadHi(y)
		}
		return h.via.d.leads[y]-1 >= h.via.d.leadLo(y) && d.leads[y]+1 <= d.leadHi(y)
	}
	var queue []int32
	for _, y := range ends {
		sp.looked++
		if to(y) {
			sp.hops[y] = hop{search: sp.search, start: true}
			queue = append(queue, y)
		}
	}
	for head := 0; head < len(queue); head++ {
		y := queue[head]
		for _, r := range on[y] {
			sp.looked++
			x := r.s.leader
			if x < 0 || x == y || sp.hops[x].search == sp.search || !canTake(y, r.d) {
				continue
			}
			sp.hops[x] = hop{search: sp.search, via: r, from: y}
			if from(x) && (!bounded || r.d.leads[x]-1 >= r.d.leadLo(x)) {
				for z := x; !sp.hops[z].start; z = sp.hops[z].from {
					h := sp.hops[z]
					led.move(h.via, z, h.from)
					sp.moveLeader(h.via.d, h.via.s, h.from)
				}
				return true
			}
			queue = append(queue, x)
		}
	}
	return false
}

// hop is how a search of shift reached a node: as a start, or by the shard
// via handed over from the node from (for pull: via handed over to from).
// search tells the current search's hops from older ones, so the planner
// keeps one per node for all searches.
type hop struct {
	search int
	start  bool
	via    ledRef
	from   int32
}

// leadShare is v's share of d's leaderships: in proportion to the replicas
// of d it holds.
func (d *spreadDB) leadShare(v int32) float64 {
	return float64(len(d.shards)) * float64(d.tgt(v)) / float64(d.total)
}

func (d *spreadDB) leadLo(v int32) int { return int(math.Floor(d.leadShare(v) + eps)) }
func (d *spreadDB) leadHi(v int32) int { return int(math.Ceil(d.leadShare(v) - eps)) }

func (sp *spreadPlanner) setLeader(d *spreadDB, s *sshard, v int32) {
	s.leader = v
	d.leads[v]++
	sp.lead[v]++
}

func (sp *spreadPlanner) moveLeader(d *spreadDB, s *sshard, u int32) {
	d.leads[s.leader]--
	sp.lead[s.leader]--
	sp.setLeader(d, s, u)
}
