package placement

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// PlaceSpread places c's shards under the spread policy:
//
//   - a shard's replicas go to distinct failure domains whenever there are
//     at least as many domains as replicas, and otherwise as evenly over the
//     domains as they allow (DomainsShort reports those shards);
//   - for every database, replicas per node are its share of the database's
//     replicas in proportion to the node's weight, rounded down or up (so
//     equal nodes differ by at most one), short of what the domains allow: a
//     domain never holds more than one replica of a shard while there are
//     enough domains, so a small domain's nodes may have to hold more;
//   - the same holds of every node's total over all databases (its share of
//     the sum of its per-database shares, rounded);
//   - leaders likewise, per database and in total, in proportion to the
//     replicas a node holds.
//
// Moves stay minimal in this sense: a replica moves only when its node is
// over its target for the shard's database or breaks the domain rule, and
// the nodes that get a database's rounded-up counts are first those that
// already hold that many (see SpreadLowerBound).
func PlaceSpread(c Cluster) (Plan, error) { return spreadPlan(c, counts{}) }

// spreadPlan is PlaceSpread of c next to shards outside c that stay where
// they are and only count: others are their replicas and leaders per node.
func spreadPlan(c Cluster, others counts) (Plan, error) {
	sp, err := planSpread(c, others)
	if err != nil {
		return Plan{}, err
	}
	return planFor(c, sp.target()), nil
}

// planSpread is the planner once it has decided every shard's replicas and
// leader.
func planSpread(c Cluster, others counts) (*spreadPlanner, error) {
	sp, err := newSpread(c)
	if err != nil {
		return nil, err
	}
	sp.count(others)
	if err := sp.targets(); err != nil {
		return nil, err
	}
	sp.balanceTargets()
	for _, d := range sp.dbs {
		if err := sp.assign(d); err != nil {
			return nil, err
		}
	}
	sp.leaders()
	return sp, nil
}

const eps = 1e-9

type spreadPlanner struct {
	*nodeIndex // the nodes that take replicas; shared, read only
	dbs        []*spreadDB
	load       []int     // replicas per node, summed over the databases' targets
	ideal      []float64 // the same, unrounded
	lead       []int
	leadIdl    []float64
	caps       map[int][]int // per replica factor: the most replicas of one shard per domain
	strict     bool          // balanceTargets: only swaps that cost no move
	// fillLead, fillIdl: lead and leadIdl as fill sees them, with the
	// databases filled so far in this plan (see leadNeed).
	fillLead []int
	fillIdl  []float64
	// hops and search: shift's search state, one hop per node.
	hops   []hop
	search int
	looked int // nodes and shards shift looked at, for the cost test
}

type spreadDB struct {
	name   string
	shards []sshard
	total  int
	x      []float64 // unrounded share per node
	base   []int     // share rounded down
	plus   []bool    // rounded up instead
	budget []int     // rounded-up counts each domain may still take
	held   []int     // replicas each node holds now
	leads  []int     // leaders per node
	miss   []int     // per shard: replicas it lacks that no node has booked
	booked map[int32][]int
	lacks  int // replicas the shards lack in all
}

func (d *spreadDB) tgt(v int32) int {
	if d.plus[v] {
		return d.base[v] + 1
	}
	return d.base[v]
}

type sshard struct {
	key       ShardKey
	want      int
	curLeader string
	orig      []int32 // current replicas on non-draining nodes
	tgt       []int32
	leader    int32
	pref      int32 // the replica fill chose to lead a new shard, or -1
}

// nodeIndex is the spread planner's view of a cluster's nodes: the nodes
// that take replicas (not draining; a node listed twice is draining if
// either says so), in id order, with their index, domain and weight. It is
// read only once built, so a Sharder keeps one across decisions: building it
// sorts and indexes every node, a cost placing one database must not pay
// (O(nodes log nodes), most of a decision's cost at 1,000 nodes).
type nodeIndex struct {
	ids     []string
	idx     map[string]int32
	dom     []int32   // domain per node
	domSize []int     // nodes per domain
	w       []float64 // weight per node
}

func newNodeIndex(all []Node) *nodeIndex {
	byID := map[string]Node{}
	for _, n := range all {
		if n.ID == "" {
			continue
		}
		prev, seen := byID[n.ID]
		n.Draining = n.Draining || (seen && prev.Draining)
		byID[n.ID] = n
	}
	var nodes []Node
	for _, n := range byID {
		if !n.Draining {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	ni := &nodeIndex{idx: make(map[string]int32, len(nodes))}
	domIdx := map[string]int32{}
	for i, n := range nodes {
		ni.ids = append(ni.ids, n.ID)
		ni.idx[n.ID] = int32(i)
		d, ok := domIdx[domainOf(n)]
		if !ok {
			d = int32(len(ni.domSize))
			domIdx[domainOf(n)] = d
			ni.domSize = append(ni.domSize, 0)
		}
		ni.dom = append(ni.dom, d)
		ni.domSize[d]++
		ni.w = append(ni.w, float64(weightOf(n)))
	}
	return ni
}

func newSpread(c Cluster) (*spreadPlanner, error) {
	ni := c.nodes
	if ni == nil {
		ni = newNodeIndex(c.Nodes)
	}
	sp := &spreadPlanner{nodeIndex: ni, caps: map[int][]int{}}
	n := len(sp.ids)
	sp.load, sp.ideal, sp.lead, sp.leadIdl = make([]int, n), make([]float64, n), make([]int, n), make([]float64, n)
	keys := make([]ShardKey, 0, len(c.Want))
	for k := range c.Want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	var d *spreadDB
	for _, k := range keys {
		want := c.Want[k]
		if err := checkWant(k, want, n); err != nil {
			return nil, err
		}
		if d == nil || d.name != k.DB {
			d = &spreadDB{name: k.DB, held: make([]int, n), leads: make([]int, n)}
			sp.dbs = append(sp.dbs, d)
		}
		cur := c.Shards[k]
		s := sshard{key: k, want: want, curLeader: cur.Leader, leader: -1, pref: -1}
		for _, id := range cur.Replicas {
			if v, ok := sp.idx[id]; ok && !slices.Contains(s.orig, v) {
				s.orig = append(s.orig, v)
				d.held[v]++
			}
		}
		d.shards = append(d.shards, s)
		d.total += want
	}
	return sp, nil
}

// domainCaps is, for a replica factor r, the most replicas of one shard each
// domain may hold: 1 while there are at least r domains, else the lowest
// level L with sum over domains of min(L, size) >= r, capped by the size.
func (sp *spreadPlanner) domainCaps(r int) []int {
	if k, ok := sp.caps[r]; ok {
		return k
	}
	k := make([]int, len(sp.domSize))
	for level := 1; ; level++ {
		sum := 0
		for x, size := range sp.domSize {
			k[x] = min(level, size)
			sum += k[x]
		}
		if sum >= r {
			break
		}
	}
	sp.caps[r] = k
	return k
}

// targets decides every database's replicas per node: the database's share
// in proportion to weight (water-filled under the caps of a node, one
// replica per shard, and of a domain), rounded down, plus one for as many
// nodes as the rounding left over. Those go first to nodes that hold that
// many already (no move), then to the nodes furthest below their total share.
func (sp *spreadPlanner) targets() error {
	n := len(sp.ids)
	for _, d := range sp.dbs {
		domCap := make([]float64, len(sp.domSize))
		domMin := make([]float64, len(sp.domSize))
		for _, s := range d.shards {
			caps := sp.domainCaps(s.want)
			sum := 0
			for _, k := range caps {
				sum += k
			}
			for x, k := range caps {
				domCap[x] += float64(k)
				// What the other domains cannot hold must be here.
				domMin[x] += float64(max(0, s.want-(sum-k)))
			}
		}
		d.x = waterfill(float64(d.total), sp.w, float64(len(d.shards)), sp.dom, domCap, domMin)
		d.base, d.plus = make([]int, n), make([]bool, n)
		d.budget = make([]int, len(sp.domSize))
		for x := range domCap {
			d.budget[x] = int(math.Round(domCap[x]))
		}
		slots := d.total
		var cand []int32
		for v := range n {
			d.base[v] = int(math.Floor(d.x[v] + eps))
			slots -= d.base[v]
			d.budget[sp.dom[v]] -= d.base[v]
			if d.x[v]-float64(d.base[v]) > eps {
				cand = append(cand, int32(v))
			}
		}
		sp.bookBase(d)
		canBook := make([]bool, n)
		for _, v := range cand {
			canBook[v] = d.held[v] > d.base[v] || sp.bookable(d, v) >= 0
		}
		slices.SortFunc(cand, func(a, b int32) int {
			ka, kb := d.held[a] > d.base[a], d.held[b] > d.base[b]
			if ka != kb {
				if ka {
					return -1
				}
				return 1
			}
			if ba, bb := canBook[a], canBook[b]; ba != bb {
				if ba {
					return -1
				}
				return 1
			}
			da := sp.ideal[a] + d.x[a] - float64(sp.load[a]+d.base[a])
			db := sp.ideal[b] + d.x[b] - float64(sp.load[b]+d.base[b])
			if c := cmp.Compare(db, da); c != 0 && math.Abs(da-db) > eps {
				return c
			}
			return cmp.Compare(a, b)
		})
		if slots = sp.pickPlus(d, cand, slots); slots != 0 {
			return fmt.Errorf("placement: database %s: %d replicas without a node: %w", d.name, slots, ErrUnplaceable)
		}
		for v := range n {
			sp.ideal[v] += d.x[v]
			sp.load[v] += d.tgt(int32(v))
		}
	}
	return nil
}

// waterfill shares total over the nodes in proportion to w, no node above
// nodeCap and every domain between its domMin and domCap: the nodes of a
// domain at a bound share it, and the rest is shared again among the others.
func waterfill(total float64, w []float64, nodeCap float64, dom []int32, domCap, domMin []float64) []float64 {
	n := len(w)
	x := make([]float64, n)
	fixed := make([]bool, n)
	sum := make([]float64, len(domCap))
	for range n + len(domCap) + 1 {
		rem, active := total, 0.0
		for v := range n {
			if fixed[v] {
				rem -= x[v]
			} else {
				active += w[v]
			}
		}
		if active == 0 {
			break
		}
		changed := false
		for v := range n {
			if !fixed[v] {
				x[v] = rem / active * w[v]
				if x[v] > nodeCap+eps {
					x[v], fixed[v], changed = nodeCap, true, true
				}
			}
		}
		if changed {
			continue
		}
		clear(sum)
		for v := range n {
			sum[dom[v]] += x[v]
		}
		for dx, c := range domCap {
			if sum[dx] < domMin[dx]-eps {
				c = domMin[dx]
			} else if sum[dx] <= c+eps {
				continue
			}
			// The domain's free nodes share what its fixed ones leave of
			// the bound.
			left, wa := c, 0.0
			for v := range n {
				if dom[v] == int32(dx) {
					if fixed[v] {
						left -= x[v]
					} else {
						wa += w[v]
					}
				}
			}
			for v := range n {
				if dom[v] == int32(dx) && !fixed[v] {
					x[v], fixed[v] = left/wa*w[v], true
				}
			}
			changed = true
		}
		if !changed {
			break
		}
	}
	return x
}

// balanceTargets moves rounded-up counts between nodes of one database until
// every node's total is its total share rounded down or up, where the
// greedy choice of targets left one outside.
func (sp *spreadPlanner) balanceTargets() {
	n := int32(len(sp.ids))
	hi := func(v int32) int { return int(math.Ceil(sp.ideal[v] - eps)) }
	lo := func(v int32) int { return int(math.Floor(sp.ideal[v] + eps)) }
	// Each swap lowers the total distance to the bounds, so this ends; the
	// bound on passes is a guard. The strict passes only make swaps that
	// cost no move (see canTakePlus).
	for _, strict := range []bool{true, false} {
		sp.strict = strict
		for range int(n) + 1 {
			moved := false
			for o := range n {
				for sp.load[o] > hi(o) && sp.swapPlus(o, func(u int32) bool { return sp.load[u] < hi(u) }) {
					moved = true
				}
			}
			for u := range n {
				for sp.load[u] < lo(u) && sp.swapPlusTo(u, func(o int32) bool { return sp.load[o] > lo(o) }) {
					moved = true
				}
			}
			if !moved {
				break
			}
		}
	}
	sp.strict = false
}

// swapPlus passes one rounded-up count of o, in some database, to a node
// accepted by ok.
func (sp *spreadPlanner) swapPlus(o int32, ok func(int32) bool) bool {
	for _, d := range sp.dbs {
		if !d.plus[o] {
			continue
		}
		for u := range int32(len(sp.ids)) {
			if sp.canTakePlus(d, o, u) && ok(u) {
				sp.movePlus(d, o, u)
				return true
			}
		}
	}
	return false
}

// swapPlusTo takes one rounded-up count for u from a node accepted by ok.
func (sp *spreadPlanner) swapPlusTo(u int32, ok func(int32) bool) bool {
	for _, d := range sp.dbs {
		for o := range int32(len(sp.ids)) {
			if d.plus[o] && sp.canTakePlus(d, o, u) && ok(o) {
				sp.movePlus(d, o, u)
				return true
			}
		}
	}
	return false
}

func (sp *spreadPlanner) canTakePlus(d *spreadDB, o, u int32) bool {
	return u != o && !d.plus[u] && d.x[u]-float64(d.base[u]) > eps &&
		(sp.dom[u] == sp.dom[o] || d.budget[sp.dom[u]] > 0) &&
		(!sp.strict || (d.held[o] <= d.base[o] && (d.held[u] > d.base[u] || sp.bookable(d, u) >= 0)))
}

func (sp *spreadPlanner) movePlus(d *spreadDB, o, u int32) {
	if d.held[u] <= d.base[u] {
		sp.book(d, u)
	}
	sp.unbook(d, o)
	d.plus[o], d.plus[u] = false, true
	d.budget[sp.dom[o]]++
	d.budget[sp.dom[u]]--
	sp.load[o]--
	sp.load[u]++
}

// target is the planned placement by node ids.
func (sp *spreadPlanner) target() map[ShardKey]ShardPlacement {
	out := map[ShardKey]ShardPlacement{}
	for _, d := range sp.dbs {
		for i := range d.shards {
			s := &d.shards[i]
			ids := make([]string, len(s.tgt))
			for j, v := range s.tgt {
				ids[j] = sp.ids[v]
			}
			t := ShardPlacement{Replicas: ids}
			if s.leader >= 0 {
				t.Leader = sp.ids[s.leader]
			}
			out[s.key] = t
		}
	}
	return out
}
