package placement

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
)

// PlaceHashed places every wanted shard of c by weighted rendezvous hashing:
// a shard ranks the non-draining nodes by weight / -ln(h), h a hash of
// (shard, node) in (0, 1), takes the best node of each failure domain in
// rank order, then the best remaining nodes if there are fewer domains than
// replicas, and is led by its best replica. The result depends only on the
// node set, never on the current placement: a node that joins takes only
// the shards it now ranks first for, and one that leaves gives up only its
// own. Balance is statistical (no max - min bound).
func PlaceHashed(c Cluster) (Plan, error) {
	var live []Node
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if n.ID != "" && !n.Draining && !seen[n.ID] {
			seen[n.ID] = true
			live = append(live, n)
		}
	}
	slices.SortFunc(live, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	target := make(map[ShardKey]ShardPlacement, len(c.Want))
	type ranked struct {
		score float64
		node  *Node
	}
	rank := make([]ranked, len(live))
	for k, want := range c.Want {
		if err := checkWant(k, want, len(live)); err != nil {
			return Plan{}, err
		}
		key := k.String()
		for i := range live {
			rank[i] = ranked{hashScore(key, &live[i]), &live[i]}
		}
		slices.SortFunc(rank, func(a, b ranked) int {
			if a.score != b.score {
				return -cmp.Compare(a.score, b.score)
			}
			return cmp.Compare(a.node.ID, b.node.ID)
		})
		replicas := make([]string, 0, want)
		domains := map[string]bool{}
		for _, r := range rank {
			if d := domainOf(*r.node); len(replicas) < want && !domains[d] {
				domains[d] = true
				replicas = append(replicas, r.node.ID)
			}
		}
		for _, r := range rank {
			if len(replicas) < want && !slices.Contains(replicas, r.node.ID) {
				replicas = append(replicas, r.node.ID)
			}
		}
		target[k] = ShardPlacement{Replicas: replicas, Leader: replicas[0]}
	}
	return planFor(c, target), nil
}

// hashScore is the weighted rendezvous score of node for a shard key.
func hashScore(key string, n *Node) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(n.ID))
	// FNV's high bits barely differ between keys that differ in their
	// last bytes: a splitmix64 finaliser spreads them, and 53 bits of the
	// result make a uniform number in (0, 1).
	x := h.Sum64()
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	u := (float64(x>>11) + 0.5) / (1 << 53)
	return float64(weightOf(*n)) / -math.Log(u)
}

// domainOf is the failure domain of n: its Domain, or its own id when unset.
func domainOf(n Node) string {
	if n.Domain == "" {
		return "\x00" + n.ID
	}
	return n.Domain
}

func weightOf(n Node) int {
	return max(n.Weight, 1)
}
