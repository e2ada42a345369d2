package placement

import "math"

// SpreadLowerBound is a lower bound on the relocations of any placement of c
// that gives every node at most its per-database share rounded up (the
// spread policy's targets), keeps at most the domain rule's share of each
// shard in a domain and at most its replica factor. PlaceSpread meets it
// whenever the layout only has to absorb nodes that came, went or drain
// (the property tests check that), and may pass it by a few moves when the
// totals over all databases force a node off its per-database best.
//
// Per database, a node keeps at most min(held, share rounded up) replicas,
// and only as many nodes as the rounding leaves may be rounded up; a domain
// keeps at most, per shard, min(replicas there now, its cap). Everything
// that exists now (up to the replica factor) and is not kept must move.
func SpreadLowerBound(c Cluster) int {
	sp, err := newSpread(c)
	if err != nil {
		return 0
	}
	if err := sp.targets(); err != nil {
		return 0
	}
	must := 0
	for k, want := range c.Want {
		must += min(want, len(dedup(c.Shards[k].Replicas)))
	}
	keep := 0
	for _, d := range sp.dbs {
		keep += sp.keepBound(d)
	}
	return must - keep
}

func (sp *spreadPlanner) keepBound(d *spreadDB) int {
	slots, over, byNode := d.total, 0, 0
	domNodes := make([]int, len(sp.domSize))
	for v := range len(sp.ids) {
		slots -= d.base[v]
		byNode += min(d.held[v], d.base[v])
		up := int(math.Ceil(d.x[v] - eps))
		if d.held[v] > d.base[v] && up > d.base[v] {
			over++
		}
		domNodes[sp.dom[v]] += min(d.held[v], up)
	}
	byNode += min(slots, over)
	domShards := make([]int, len(sp.domSize))
	byShard := 0
	for i := range d.shards {
		s := &d.shards[i]
		byShard += min(s.want, len(s.orig))
		caps := sp.domainCaps(s.want)
		in := make([]int, len(sp.domSize))
		for _, v := range s.orig {
			in[sp.dom[v]]++
		}
		for x := range in {
			domShards[x] += min(in[x], caps[x])
		}
	}
	byDomain := 0
	for x := range domNodes {
		byDomain += min(domNodes[x], domShards[x])
	}
	return min(byNode, byDomain, byShard)
}
