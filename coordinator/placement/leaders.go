package placement

import "slices"

// leaderBalancer spreads shard leadership so every non-draining node leads
// between lo and hi shards. A greedy pass does nearly all the work; the rest
// is fixed with augmenting paths over the node graph (node x -> node y when x
// leads a shard y also holds), which is exact: if no path exists, no layout of
// leaders over these replicas can do better.
type leaderBalancer struct {
	p      *planner
	lead   []int32
	seen   []uint32 // visit stamps, so each search does not clear an array
	stamp  uint32
	parent []int32 // shard used to reach a node
	from   []int32 // node the shard was reached from
	queue  []int32
}

func (p *planner) assignLeaders() {
	n := len(p.nodeIDs)
	if len(p.shards) == 0 {
		return
	}
	lb := &leaderBalancer{
		p:      p,
		lead:   make([]int32, n),
		seen:   make([]uint32, n),
		parent: make([]int32, n),
		from:   make([]int32, n),
	}
	lo := int32(len(p.shards) / n)
	hi := lo
	if len(p.shards)%n != 0 {
		hi++
	}
	// Keep current leaders that are still replicas while their node is
	// under the ceiling: a leader change costs a handover.
	for i := range p.shards {
		s := &p.shards[i]
		if v, ok := p.nodeIdx[s.curLeader]; ok && slices.Contains(s.tgt, v) && lb.lead[v] < hi {
			s.leader = v
			lb.lead[v]++
		}
	}
	for i := range p.shards {
		s := &p.shards[i]
		if s.leader >= 0 {
			continue
		}
		// Least loaded replica; on ties a replica that already has the data
		// (it needs no sync before it can lead), then the lowest node.
		best := int32(-1)
		bestOrig := false
		for _, v := range s.tgt {
			orig := slices.Contains(s.orig, v)
			if best < 0 || lb.lead[v] < lb.lead[best] ||
				(lb.lead[v] == lb.lead[best] && orig && !bestOrig) ||
				(lb.lead[v] == lb.lead[best] && orig == bestOrig && v < best) {
				best, bestOrig = v, orig
			}
		}
		s.leader = best
		lb.lead[best]++
	}
	for v := range int32(n) {
		for lb.lead[v] > hi && lb.shift(v, true, func(w int32) bool { return lb.lead[w] < hi }) {
		}
	}
	for v := range int32(n) {
		for lb.lead[v] < lo && lb.shift(v, false, func(w int32) bool { return lb.lead[w] > lo }) {
		}
	}
}

// shift moves one leadership away from start (down=true) or onto start
// (down=false) along a shortest path ending at a node accepted by done.
func (lb *leaderBalancer) shift(start int32, down bool, done func(int32) bool) bool {
	p := lb.p
	lb.stamp++
	lb.seen[start] = lb.stamp
	lb.queue = append(lb.queue[:0], start)
	var leaderOnly [1]int32
	for head := 0; head < len(lb.queue); head++ {
		x := lb.queue[head]
		for _, t := range p.onNode[x] {
			s := &p.shards[t]
			if down != (s.leader == x) {
				continue
			}
			// Going down, leadership of t can pass from x to any other
			// replica; going up, x can take t from its leader.
			next := s.tgt
			if !down {
				leaderOnly[0] = s.leader
				next = leaderOnly[:]
			}
			for _, y := range next {
				if y == x || lb.seen[y] == lb.stamp {
					continue
				}
				lb.seen[y] = lb.stamp
				lb.parent[y], lb.from[y] = t, x
				if done(y) {
					lb.apply(start, y, down)
					return true
				}
				lb.queue = append(lb.queue, y)
			}
		}
	}
	return false
}

func (lb *leaderBalancer) apply(start, end int32, down bool) {
	p := lb.p
	for y := end; y != start; y = lb.from[y] {
		s := &p.shards[lb.parent[y]]
		if down {
			s.leader = y
		} else {
			s.leader = lb.from[y]
		}
	}
	if down {
		lb.lead[start]--
		lb.lead[end]++
	} else {
		lb.lead[start]++
		lb.lead[end]--
	}
}
