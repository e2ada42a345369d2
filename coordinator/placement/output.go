package placement

import "slices"

// plan turns the planner's index-based result into a Plan keyed by node ids.
func (p *planner) plan() Plan {
	out := Plan{Target: make(map[ShardKey]ShardPlacement, len(p.shards))}
	// One backing array for all replica lists, for the same reason as tgt.
	ids := make([]string, 0, p.total)
	var adds, leaders, removes []Move
	for i := range p.shards {
		s := &p.shards[i]
		start := len(ids)
		for _, v := range s.tgt {
			ids = append(ids, p.nodeIDs[v])
		}
		replicas := ids[start:len(ids):len(ids)]
		leader := p.nodeIDs[s.leader]
		out.Target[s.key] = ShardPlacement{Replicas: replicas, Leader: leader}

		kept := 0
		for _, id := range replicas {
			if slices.Contains(s.cur, id) {
				kept++
			} else {
				adds = append(adds, Move{Kind: MoveAdd, Shard: s.key, To: id})
			}
		}
		out.Relocations += min(s.want, len(s.cur)) - kept
		if leader != s.curLeader {
			leaders = append(leaders, Move{Kind: MoveLeader, Shard: s.key, From: s.curLeader, To: leader})
		}
		for _, id := range s.cur {
			if !slices.Contains(replicas, id) {
				removes = append(removes, Move{Kind: MoveRemove, Shard: s.key, From: id})
			}
		}
	}
	for _, k := range p.dropped {
		for _, id := range dedup(p.current[k].Replicas) {
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
