package placement

import (
	"fmt"
	"slices"
)

// shard is the planner's working copy of one shard. Nodes are int32 indexes
// into planner.nodeIDs so the hot loops never hash strings.
type shard struct {
	key       ShardKey
	want      int
	cur       []string // distinct current replicas, any node, input order
	curLeader string
	orig      []int32 // current replicas on non-draining nodes
	trimmed   []int32 // dropped because the replica factor went down
	tgt       []int32 // target replicas; starts as the kept ones
	leader    int32
}

func (s *shard) holds(v int32) bool {
	return slices.Contains(s.tgt, v) || slices.Contains(s.trimmed, v)
}

type planner struct {
	nodeIDs []string // non-draining, sorted
	nodeIdx map[string]int32
	shards  []shard // sorted by key
	dropped []ShardKey
	current map[ShardKey]ShardPlacement
	total   int       // sum of Want
	cnt     []int     // kept candidates per node after trim
	onNode  [][]int32 // shard indexes per node in the target
	pool    int       // q+1 slots not yet handed out
	q       int
	b       buckets
}

func newPlanner(c Cluster) (*planner, error) {
	draining := make(map[string]bool, len(c.Nodes))
	for _, n := range c.Nodes {
		if n.ID != "" {
			draining[n.ID] = draining[n.ID] || n.Draining
		}
	}
	p := &planner{nodeIdx: make(map[string]int32, len(draining)), current: c.Shards}
	for id, d := range draining {
		if !d {
			p.nodeIDs = append(p.nodeIDs, id)
		}
	}
	slices.Sort(p.nodeIDs)
	for i, id := range p.nodeIDs {
		p.nodeIdx[id] = int32(i)
	}
	n := len(p.nodeIDs)

	keys := make([]ShardKey, 0, len(c.Want))
	for k := range c.Want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	size := 0
	for k, sp := range c.Shards {
		if _, ok := c.Want[k]; ok {
			size += len(sp.Replicas)
		} else {
			p.dropped = append(p.dropped, k)
		}
	}
	slices.SortFunc(p.dropped, compareKeys)

	p.shards = make([]shard, len(keys))
	p.cnt = make([]int, n)
	room := 0
	// Shared backing arrays: per-shard appends would allocate several times
	// per shard, which dominates a 100k-shard re-plan.
	curBuf := make([]string, 0, size)
	origBuf := make([]int32, 0, size)
	for i, k := range keys {
		want := c.Want[k]
		if err := checkWant(k, want, n); err != nil {
			return nil, err
		}
		s := &p.shards[i]
		s.key, s.want, s.leader = k, want, -1
		cur := c.Shards[k]
		s.curLeader = cur.Leader
		m := len(cur.Replicas)
		s.cur = curBuf[len(curBuf) : len(curBuf) : len(curBuf)+m]
		s.orig = origBuf[len(origBuf) : len(origBuf) : len(origBuf)+m]
		curBuf, origBuf = curBuf[:len(curBuf)+m], origBuf[:len(origBuf)+m]
		for _, id := range cur.Replicas {
			if id == "" || slices.Contains(s.cur, id) {
				continue
			}
			s.cur = append(s.cur, id)
			if v, ok := p.nodeIdx[id]; ok {
				s.orig = append(s.orig, v)
				p.cnt[v]++
			}
		}
		p.total += want
		room += max(want, len(s.orig))
	}
	// One backing array for every target slice: 100k shards would otherwise
	// mean 100k small allocations on the re-plan path.
	buf := make([]int32, 0, room)
	for i := range p.shards {
		s := &p.shards[i]
		c := max(s.want, len(s.orig))
		s.tgt = append(buf[len(buf):len(buf):len(buf)+c], s.orig...)
		buf = buf[:len(buf)+c]
	}
	return p, nil
}

// mustHave is the number of replicas that exist now and survive in some form:
// a shard keeps min(want, current) of its replicas or replaces them elsewhere.
func (p *planner) mustHave() int {
	sum := 0
	for i := range p.shards {
		sum += min(p.shards[i].want, len(p.shards[i].cur))
	}
	return sum
}

// trim applies replica factor decreases by dropping replicas from the most
// loaded nodes, which are the ones that would have to shed anyway.
func (p *planner) trim() {
	for i := range p.shards {
		s := &p.shards[i]
		for len(s.tgt) > s.want {
			best := 0
			for j, v := range s.tgt {
				if b := s.tgt[best]; p.cnt[v] > p.cnt[b] || (p.cnt[v] == p.cnt[b] && v < b) {
					best = j
				}
			}
			v := s.tgt[best]
			p.cnt[v]--
			s.trimmed = append(s.trimmed, v)
			s.tgt = slices.Delete(s.tgt, best, best+1)
		}
	}
}

// shed decides each node's capacity (q or q+1) and removes replicas from
// nodes above it. The q+1 slots go first to nodes that already hold that many,
// which is what makes the number of kept replicas maximal.
func (p *planner) shed() {
	n := len(p.nodeIDs)
	p.q, p.pool = p.total/n, p.total%n
	capOf := make([]int, n)
	for v := range n {
		capOf[v] = p.q
		if p.cnt[v] >= p.q+1 && p.pool > 0 {
			capOf[v]++
			p.pool--
		}
	}
	p.onNode = make([][]int32, n)
	for v := range n {
		p.onNode[v] = make([]int32, 0, max(p.cnt[v], p.q+1))
	}
	maxWant := 0
	for i := range p.shards {
		s := &p.shards[i]
		maxWant = max(maxWant, s.want)
		for _, v := range s.tgt {
			p.onNode[v] = append(p.onNode[v], int32(i))
		}
	}
	missing := make([]int, len(p.shards))
	for i := range p.shards {
		missing[i] = p.shards[i].want - len(p.shards[i].tgt)
	}
	// Nodes that will have room after shedding. When there are few, a shed
	// replica must be one that has a node with room to go to, or the fill
	// needs a repair that may cost an extra relocation.
	var room []int32
	pool := p.pool
	for v := range n {
		if p.cnt[v] < capOf[v] || (p.cnt[v] == p.q && pool > 0) {
			room = append(room, int32(v))
			if p.cnt[v] == p.q {
				pool--
			}
		}
	}
	stuck := func(s *shard, missing int) bool {
		if len(room) > s.want+len(s.trimmed) {
			return false
		}
		free := 0
		for _, u := range room {
			if !s.holds(u) {
				free++
			}
		}
		return free <= missing
	}
	for v := range n {
		excess := p.cnt[v] - capOf[v]
		if excess <= 0 {
			continue
		}
		// Shed replicas of shards that miss the fewest replicas so far: each
		// missing replica must land on a distinct node with room, so
		// spreading the misses keeps the fill free of conflicts. Among those,
		// keep the shard's leader where it is.
		node := int32(v)
		list := p.onNode[v]
		worst := 2*maxWant + 2
		for score := 0; excess > 0 && score < 2*worst; score++ {
			for _, i := range list {
				s := &p.shards[i]
				sc := 2 * missing[i]
				if s.curLeader == p.nodeIDs[v] {
					sc++
				}
				if stuck(s, missing[i]) {
					sc += worst
				}
				j := slices.Index(s.tgt, node)
				if sc != score || excess == 0 || j < 0 { // j < 0: shed in an earlier pass
					continue
				}
				s.tgt = slices.Delete(s.tgt, j, j+1)
				missing[i]++
				excess--
			}
		}
		p.onNode[v] = slices.DeleteFunc(list, func(i int32) bool {
			return !slices.Contains(p.shards[i].tgt, node)
		})
	}
}

// fill places the missing replicas of every shard on the nodes with the most
// room, largest demands first, then repairs the rare shard whose only nodes
// with room already hold it.
func (p *planner) fill() error {
	n := len(p.nodeIDs)
	free := make([]int32, n)
	for v := range n {
		free[v] = int32(p.q + 1 - len(p.onNode[v]))
	}
	p.b.init(free)

	var order []int32
	for i := range p.shards {
		if len(p.shards[i].tgt) < p.shards[i].want {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		sa, sb := &p.shards[a], &p.shards[b]
		return (sb.want - len(sb.tgt)) - (sa.want - len(sa.tgt))
	})

	var picks []int32
	for _, i := range order {
		s := &p.shards[i]
		need := s.want - len(s.tgt)
		picks = picks[:0]
		fromOne := 0
	scan:
		for f := p.b.top; f >= 1; f-- {
			for _, v := range p.b.lists[f] {
				if len(picks) == need {
					break scan
				}
				if f == 1 && fromOne == p.pool {
					break scan
				}
				if s.holds(v) || slices.Contains(picks, v) {
					continue
				}
				picks = append(picks, v)
				if f == 1 {
					fromOne++
				}
			}
		}
		for _, v := range picks {
			p.take(v)
			s.tgt = append(s.tgt, v)
			p.onNode[v] = append(p.onNode[v], i)
		}
		for len(s.tgt) < s.want {
			if !p.repair(i) {
				return fmt.Errorf("placement: shard %s needs %d more replicas: %w",
					s.key, s.want-len(s.tgt), ErrUnplaceable)
			}
		}
	}
	return nil
}

// take uses one slot of room on node v.
func (p *planner) take(v int32) {
	if p.b.free[v] == 1 {
		p.pool--
	}
	p.b.take(v)
}

// repair gives shard i one more replica when every node with room already
// holds it: some shard t moves from a node w to a node u with room, and i
// takes w. In order of preference t is a replica fill itself just added (no
// cost), or w is a node i was shed from (i is kept there instead of t, no net
// cost), or anything else (one more relocation).
func (p *planner) repair(i int32) bool {
	s := &p.shards[i]
	for level := range 3 {
		for f := p.b.top; f >= 1; f-- {
			if f == 1 && p.pool == 0 {
				break
			}
			for _, u := range p.b.lists[f] {
				for w := range int32(len(p.nodeIDs)) {
					if w == u || s.holds(w) || (level == 1 && !slices.Contains(s.orig, w)) {
						continue
					}
					for j, t := range p.onNode[w] {
						ts := &p.shards[t]
						if t == i || ts.holds(u) || (level < 2 && slices.Contains(ts.orig, w) != (level == 1)) {
							continue
						}
						ts.tgt[slices.Index(ts.tgt, w)] = u
						p.take(u)
						p.onNode[u] = append(p.onNode[u], t)
						p.onNode[w][j] = i
						s.tgt = append(s.tgt, w)
						return true
					}
				}
			}
		}
	}
	return false
}

// buckets groups nodes by remaining room so the fill finds the emptiest nodes
// in O(1) instead of scanning all nodes per shard.
type buckets struct {
	lists [][]int32
	pos   []int32
	free  []int32
	top   int
}

func (b *buckets) init(free []int32) {
	b.free = free
	b.pos = make([]int32, len(free))
	b.top = 0
	for _, f := range free {
		b.top = max(b.top, int(f))
	}
	b.lists = make([][]int32, b.top+1)
	for v, f := range free {
		b.pos[v] = int32(len(b.lists[f]))
		b.lists[f] = append(b.lists[f], int32(v))
	}
}

func (b *buckets) take(v int32) {
	f := b.free[v]
	l := b.lists[f]
	last := l[len(l)-1]
	l[b.pos[v]] = last
	b.pos[last] = b.pos[v]
	b.lists[f] = l[:len(l)-1]
	f--
	b.free[v] = f
	b.pos[v] = int32(len(b.lists[f]))
	b.lists[f] = append(b.lists[f], v)
	for b.top > 0 && len(b.lists[b.top]) == 0 {
		b.top--
	}
}
