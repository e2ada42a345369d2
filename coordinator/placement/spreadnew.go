package placement

import "slices"

// PlaceSpreadNew places the shards of add (none may have replicas yet) as
// PlaceSpread would, next to the others, which stay where they are: their
// replicas and leaders count towards every node's total, and only the
// databases of add are planned. The plan's target holds every shard of c.
func PlaceSpreadNew(c Cluster, add map[ShardKey]int) (Plan, error) {
	dbs := map[string]bool{}
	for k := range add {
		dbs[k.DB] = true
	}
	sub := Cluster{Nodes: c.Nodes, Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
	var others counts
	for k, want := range c.Want {
		if dbs[k.DB] {
			sub.Want[k] = want
			if cur, ok := c.Shards[k]; ok {
				sub.Shards[k] = cur
			}
		} else {
			others.add(c.Shards[k], 1)
		}
	}
	plan, err := placeSpreadSub(sub, others, add)
	if err != nil {
		return Plan{}, err
	}
	for k, cur := range c.Shards {
		if _, ok := c.Want[k]; ok && !dbs[k.DB] {
			plan.Target[k] = cur
		}
	}
	return plan, nil
}

// placeSpreadSub places the shards of add in sub, which holds every shard
// of their databases (and nothing else), next to the shards of the other
// databases, which only count: others are their replicas and leaders per
// node. Its cost is that of sub and the nodes, whatever the others hold;
// the plan covers sub's shards only.
func placeSpreadSub(sub Cluster, others counts, add map[ShardKey]int) (Plan, error) {
	ext, err := extend(sub, add)
	if err != nil {
		return Plan{}, err
	}
	return spreadPlan(ext, others)
}

// NewSpread is the sharder of PlaceSpread. Its PlaceNew plans only the
// databases of the new partitions, the others counted per node (kept up to
// date as partitions are registered): its cost does not grow with the
// cluster's other databases.
func NewSpread() Sharder {
	return &table{policy: "spread", place: PlaceSpread, placeSub: placeSpreadSub, bound: SpreadLowerBound}
}

// counts are the replicas and leaders per node of a set of placed shards.
type counts struct {
	replicas, leaders map[string]int
}

// add counts p's replicas and leader (a leader among them) sign times.
func (c *counts) add(p ShardPlacement, sign int) {
	if c.replicas == nil {
		c.replicas, c.leaders = map[string]int{}, map[string]int{}
	}
	reps := dedup(p.Replicas)
	for _, id := range reps {
		c.replicas[id] += sign
	}
	if p.Leader != "" && slices.Contains(reps, p.Leader) {
		c.leaders[p.Leader] += sign
	}
}

// count adds the shards of the other databases to every node's totals:
// their replicas and leaders on it, and its weight's share of all of them.
func (sp *spreadPlanner) count(others counts) {
	replicas, shards, weight := 0, 0, 0.0
	for v, id := range sp.ids {
		sp.load[v] += others.replicas[id]
		sp.lead[v] += others.leaders[id]
		replicas += others.replicas[id]
		shards += others.leaders[id]
	}
	for _, w := range sp.w {
		weight += w
	}
	for v, w := range sp.w {
		sp.ideal[v] += float64(replicas) * w / weight
		sp.leadIdl[v] += float64(shards) * w / weight
	}
}
