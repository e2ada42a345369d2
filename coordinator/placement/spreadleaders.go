package placement

import (
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
// by chains of hand-overs, where such chains exist. A chain starts at a
// node leading a shard of dbs and ends at a replica of one, so only those
// are tried: placing one database on a large cluster whose totals are
// uneven then costs that database's shards, not a failed search from every
// node for every node.
func (sp *spreadPlanner) level(dbs []*spreadDB, bounded bool, count func(int32) int, lo, hi func(int32) int) {
	holds := map[int32]bool{} // replicas of a shard of dbs: the only possible ends
	for _, d := range dbs {
		for i := range d.shards {
			for _, v := range d.shards[i].tgt {
				holds[v] = true
			}
		}
	}
	led := indexLeaders(dbs)
	leads := func(v int32) bool { return len(led[v]) > 0 }
	n := int32(len(sp.ids))
	for v := range n {
		for count(v) > hi(v) && leads(v) && sp.shift(v, led, bounded, func(y int32) bool { return count(y) < hi(y) }) {
		}
	}
	for v := range n {
		if !holds[v] {
			continue
		}
		for count(v) < lo(v) {
			moved := false
			for _, x := range led.nodes() {
				if x != v && count(x) > lo(x) && sp.shift(x, led, bounded, func(y int32) bool { return y == v }) {
					moved = true
					break
				}
			}
			if !moved {
				break
			}
		}
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

// nodes are the nodes leading a shard, in node order.
func (led leaderIndex) nodes() []int32 {
	out := make([]int32, 0, len(led))
	for v, refs := range led {
		if v >= 0 && len(refs) > 0 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
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

// shift moves one leadership off start along a shortest chain of hand-overs
// (each passes a shard of the leveled databases, led as indexed in led, from
// its leader to another of its replicas) to a node accepted by done. bounded
// keeps every node's count of each database within its bounds: a node in
// the middle of the chain that receives and gives in one database keeps its
// count there.
func (sp *spreadPlanner) shift(start int32, led leaderIndex, bounded bool, done func(int32) bool) bool {
	type hop struct {
		via  ledRef
		from int32
	}
	seen := map[int32]hop{start: {}}
	canGive := func(x int32, d *spreadDB) bool {
		in := seen[x].via.d
		if !bounded || (x != start && in == d) {
			return true
		}
		return d.leads[x]-1 >= d.leadLo(x) && (x == start || in.leads[x]+1 <= in.leadHi(x))
	}
	queue := []int32{start}
	for head := 0; head < len(queue); head++ {
		x := queue[head]
		for _, r := range led[x] {
			if !canGive(x, r.d) {
				continue
			}
			for _, y := range r.s.tgt {
				if _, ok := seen[y]; ok {
					continue
				}
				seen[y] = hop{r, x}
				if done(y) && (!bounded || r.d.leads[y]+1 <= r.d.leadHi(y)) {
					for z := y; z != start; z = seen[z].from {
						h := seen[z]
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
