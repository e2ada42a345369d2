package placement

import "slices"

// plan turns the planner's index-based result into a Plan keyed by node ids.
func (p *planner) plan() Plan {
	target := make(map[ShardKey]ShardPlacement, len(p.shards))
	// One backing array for all replica lists, for the same reason as tgt.
	ids := make([]string, 0, p.total)
	keys := make([]ShardKey, len(p.shards))
	for i := range p.shards {
		s := &p.shards[i]
		start := len(ids)
		for _, v := range s.tgt {
			ids = append(ids, p.nodeIDs[v])
		}
		keys[i] = s.key
		target[s.key] = ShardPlacement{Replicas: ids[start:len(ids):len(ids)], Leader: p.nodeIDs[s.leader]}
	}
	return buildPlan(keys, target, func(i int) (int, []string, string) {
		s := &p.shards[i]
		return s.want, s.cur, s.curLeader
	}, p.dropped, p.current)
}

// planFor is the Plan that takes c's current placement to target, which
// holds every shard of c.Want.
func planFor(c Cluster, target map[ShardKey]ShardPlacement) Plan {
	keys := make([]ShardKey, 0, len(c.Want))
	for k := range c.Want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	var dropped []ShardKey
	for k := range c.Shards {
		if _, ok := c.Want[k]; !ok {
			dropped = append(dropped, k)
		}
	}
	slices.SortFunc(dropped, compareKeys)
	return buildPlan(keys, target, func(i int) (int, []string, string) {
		cur := c.Shards[keys[i]]
		return c.Want[keys[i]], dedup(cur.Replicas), cur.Leader
	}, dropped, c.Shards)
}

// buildPlan lists the moves from the current placement (shard i of keys
// wants want replicas and has cur, led by leader) to target, and removes
// every replica of the dropped shards.
func buildPlan(keys []ShardKey, target map[ShardKey]ShardPlacement, shard func(i int) (want int, cur []string, leader string),
	dropped []ShardKey, current map[ShardKey]ShardPlacement) Plan {
	out := Plan{Target: target}
	var adds, leaders, removes []Move
	for i, k := range keys {
		want, cur, curLeader := shard(i)
		t := target[k]
		kept := 0
		for _, id := range t.Replicas {
			if slices.Contains(cur, id) {
				kept++
			} else {
				adds = append(adds, Move{Kind: MoveAdd, Shard: k, To: id})
			}
		}
		out.Relocations += min(want, len(cur)) - kept
		if t.Leader != curLeader {
			leaders = append(leaders, Move{Kind: MoveLeader, Shard: k, From: curLeader, To: t.Leader})
		}
		for _, id := range cur {
			if !slices.Contains(t.Replicas, id) {
				removes = append(removes, Move{Kind: MoveRemove, Shard: k, From: id})
			}
		}
	}
	for _, k := range dropped {
		for _, id := range dedup(current[k].Replicas) {
			removes = append(removes, Move{Kind: MoveRemove, Shard: k, From: id})
		}
	}
	out.Moves = slices.Concat(adds, leaders, removes)
	return out
}

func dedup(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
