package placement

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
)

// assign gives every shard of d its replicas on the nodes' targets for d:
// each keeps its current replicas except those over a node's target, over
// its domain's share of the shard or over its replica factor, and the
// missing ones go to nodes with room, in domains the shard has the fewest
// replicas in.
func (sp *spreadPlanner) assign(d *spreadDB) error {
	cnt := map[int32]int{}
	on := map[int32][]int32{}
	for i := range d.shards {
		s := &d.shards[i]
		s.tgt = slices.Clone(s.orig)
		for _, v := range s.tgt {
			cnt[v]++
		}
	}
	excess := func(v int32) int { return cnt[v] - d.tgt(v) }
	// Drop replicas that break the domain rule or the replica factor, the
	// most loaded node's first.
	for i := range d.shards {
		s := &d.shards[i]
		caps := sp.domainCaps(s.want)
		for {
			drop := -1
			for j, v := range s.tgt {
				over := sp.inDomain(s.tgt, sp.dom[v]) > caps[sp.dom[v]] || len(s.tgt) > s.want
				if over && (drop < 0 || excess(v) > excess(s.tgt[drop])) {
					drop = j
				}
			}
			if drop < 0 {
				break
			}
			cnt[s.tgt[drop]]--
			s.tgt = slices.Delete(s.tgt, drop, drop+1)
		}
		for _, v := range s.tgt {
			on[v] = append(on[v], int32(i))
		}
	}
	// Shed from nodes over target: followers before leaders, shards that
	// miss the fewest replicas first, so the misses spread.
	for _, v := range slices.Sorted(maps.Keys(on)) {
		list := on[v]
		slices.SortStableFunc(list, func(a, b int32) int {
			sa, sb := &d.shards[a], &d.shards[b]
			la, lb := sa.curLeader == sp.ids[v], sb.curLeader == sp.ids[v]
			if la != lb {
				if la {
					return 1
				}
				return -1
			}
			return cmp.Compare(sa.want-len(sa.tgt), sb.want-len(sb.tgt))
		})
		for _, i := range list {
			if excess(v) <= 0 {
				break
			}
			s := &d.shards[i]
			s.tgt = slices.DeleteFunc(s.tgt, func(u int32) bool { return u == v })
			cnt[v]--
		}
	}
	return sp.fill(d, cnt)
}

// fill adds the missing replicas of d's shards, those missing most first.
func (sp *spreadPlanner) fill(d *spreadDB, cnt map[int32]int) error {
	var room []int32
	domRoom := make([]int, len(sp.domSize))
	for v := range int32(len(sp.ids)) {
		if r := d.tgt(v) - cnt[v]; r > 0 {
			room = append(room, v)
			domRoom[sp.dom[v]] += r
		}
	}
	order := make([]int, len(d.shards))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		sa, sb := &d.shards[a], &d.shards[b]
		return cmp.Compare(sb.want-len(sb.tgt), sa.want-len(sa.tgt))
	})
	take := func(s *sshard, v int32) {
		s.tgt = append(s.tgt, v)
		cnt[v]++
		domRoom[sp.dom[v]]--
	}
	// A new shard's first replica goes to the node furthest below its share
	// of leaderships, which then leads it: the replicas a database is given
	// decide which nodes can lead it, so choosing them blind to leaderships
	// can leave a node short that no hand-over reaches.
	need, chosen := sp.leadNeed(d), make([]int, len(sp.ids))
	for _, i := range order {
		s := &d.shards[i]
		caps := sp.domainCaps(s.want)
		sumCaps := 0
		for _, k := range caps {
			sumCaps += k
		}
		for len(s.tgt) < s.want {
			best := int32(-1)
			var bestScore [5]int
			for _, v := range room {
				x := sp.dom[v]
				in := sp.inDomain(s.tgt, x)
				if d.tgt(v)-cnt[v] <= 0 || slices.Contains(s.tgt, v) || in >= caps[x] {
					continue
				}
				// A domain the shard must have more replicas in first.
				must := 1
				if in < s.want-(sumCaps-caps[x]) {
					must = 0
				}
				lead := 0
				if len(s.tgt) == 0 {
					lead = -need[v]
					if chosen[v] >= d.leadHi(v) {
						lead = math.MaxInt // it would lead more than its share of d
					}
				}
				score := [5]int{must, in, lead, -domRoom[x], -(d.tgt(v) - cnt[v])}
				if best < 0 || slices.Compare(score[:], bestScore[:]) < 0 {
					best, bestScore = v, score
				}
			}
			if best >= 0 {
				if len(s.tgt) == 0 {
					s.pref = best
					need[best] -= leadUnit
					chosen[best]++
				}
				take(s, best)
				continue
			}
			u, ok := sp.repair(d, i, room, cnt)
			if !ok {
				// Only a longer chain of swaps would fit it under the
				// targets: go one over on the least loaded node it may use.
				u, ok = sp.overflow(d, s, cnt)
				if !ok {
					return fmt.Errorf("placement: shard %s needs %d more replicas: %w", s.key, s.want-len(s.tgt), ErrUnplaceable)
				}
				s.tgt = append(s.tgt, u)
			}
			cnt[u]++
			domRoom[sp.dom[u]]--
		}
	}
	sp.filled(d)
	return nil
}

// repair gives shard i one more replica when no node with room can take it:
// another shard t of the database moves from a node w to a node u with room,
// and i takes w. Moving a replica fill just added costs nothing, so such a t
// is tried first. It returns u.
func (sp *spreadPlanner) repair(d *spreadDB, i int, room []int32, cnt map[int32]int) (int32, bool) {
	s := &d.shards[i]
	capsS := sp.domainCaps(s.want)
	for pass := range 2 {
		for ti := range d.shards {
			t := &d.shards[ti]
			if ti == i {
				continue
			}
			capsT := sp.domainCaps(t.want)
			for j, w := range t.tgt {
				if (pass == 0) == slices.Contains(t.orig, w) || slices.Contains(s.tgt, w) ||
					sp.inDomain(s.tgt, sp.dom[w]) >= capsS[sp.dom[w]] {
					continue
				}
				for _, u := range room {
					if d.tgt(u)-cnt[u] <= 0 || slices.Contains(t.tgt, u) {
						continue
					}
					in := sp.inDomain(t.tgt, sp.dom[u])
					if sp.dom[u] == sp.dom[w] {
						in--
					}
					if in >= capsT[sp.dom[u]] {
						continue
					}
					t.tgt[j] = u
					s.tgt = append(s.tgt, w)
					return u, true
				}
			}
		}
	}
	return -1, false
}

// overflow picks the node, under the domain rule, where s's next replica
// puts the fewest above target.
func (sp *spreadPlanner) overflow(d *spreadDB, s *sshard, cnt map[int32]int) (int32, bool) {
	caps := sp.domainCaps(s.want)
	best := int32(-1)
	for v := range int32(len(sp.ids)) {
		if slices.Contains(s.tgt, v) || sp.inDomain(s.tgt, sp.dom[v]) >= caps[sp.dom[v]] {
			continue
		}
		if best < 0 || cnt[v]-d.tgt(v) < cnt[best]-d.tgt(best) {
			best = v
		}
	}
	return best, best >= 0
}

// inDomain counts the nodes of tgt in domain x.
func (sp *spreadPlanner) inDomain(tgt []int32, x int32) int {
	n := 0
	for _, v := range tgt {
		if sp.dom[v] == x {
			n++
		}
	}
	return n
}

// leadUnit is one leadership in the fixed-point units of leadNeed.
const leadUnit = 1 << 20

// leadNeed is, per node, how far its leaderships fall short of its share
// once d is placed, counting the databases filled before d in this plan
// (their leaders are picked after all are filled), in leadUnit units so
// ties compare exactly.
func (sp *spreadPlanner) leadNeed(d *spreadDB) []int {
	if sp.fillLead == nil {
		sp.fillLead, sp.fillIdl = slices.Clone(sp.lead), slices.Clone(sp.leadIdl)
	}
	need := make([]int, len(sp.ids))
	for v := range need {
		share := sp.fillIdl[v] + float64(len(d.shards))*d.x[v]/float64(d.total)
		need[v] = int(math.Round((share - float64(sp.fillLead[v])) * leadUnit))
	}
	return need
}

// filled counts d's likely leaders (the chosen ones, else current leaders
// that stay) and share in what leadNeed sees of the next databases.
func (sp *spreadPlanner) filled(d *spreadDB) {
	for v := range sp.ids {
		sp.fillIdl[v] += float64(len(d.shards)) * d.x[v] / float64(d.total)
	}
	for i := range d.shards {
		s := &d.shards[i]
		if s.pref >= 0 {
			sp.fillLead[s.pref]++
		} else if v, ok := sp.idx[s.curLeader]; ok && slices.Contains(s.tgt, v) {
			sp.fillLead[v]++
		}
	}
}
