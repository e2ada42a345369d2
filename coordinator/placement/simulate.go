package placement

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalidParams means Simulate was given parameters it cannot run.
var ErrInvalidParams = errors.New("invalid simulate parameters")

// SimulateParams describes a what-if: P shards x R replicas placed on N nodes,
// then AddNodes empty nodes join and RemoveNodes of the original nodes leave.
type SimulateParams struct {
	Nodes, Shards, Replicas, AddNodes, RemoveNodes int
	// Domains spreads the nodes round-robin over this many failure domains
	// (0: none, every node is its own).
	Domains int
	// Policy names the sharder (see Policies); "" is "spread".
	Policy string
}

// MinMax is a spread of per-node counts.
type MinMax struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// SimulateResult reports the second (re-)plan of a simulation.
type SimulateResult struct {
	Policy          string `json:"policy"`
	Moves           int    `json:"moves"`
	LowerBound      int    `json:"lower_bound"`
	ReplicasPerNode MinMax `json:"replicas_per_node"`
	LeadersPerNode  MinMax `json:"leaders_per_node"`
	// DomainsPerShard is the fewest and most failure domains a shard's
	// replicas span after the re-plan.
	DomainsPerShard MinMax  `json:"domains_per_shard"`
	PlanMS          float64 `json:"plan_ms"`
}

// Validate reports the first parameter that makes the simulation impossible.
func (p SimulateParams) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("simulate: "+format+": %w", append(args, ErrInvalidParams)...)
	}
	switch {
	case p.Nodes < 1:
		return bad("nodes %d must be at least 1", p.Nodes)
	case p.Shards < 1:
		return bad("shards %d must be at least 1", p.Shards)
	case p.Replicas < 1:
		return bad("replicas %d must be at least 1", p.Replicas)
	case p.AddNodes < 0:
		return bad("add-nodes %d must not be negative", p.AddNodes)
	case p.RemoveNodes < 0:
		return bad("remove-nodes %d must not be negative", p.RemoveNodes)
	case p.RemoveNodes > p.Nodes:
		return bad("remove-nodes %d exceeds nodes %d", p.RemoveNodes, p.Nodes)
	case p.Replicas > p.Nodes:
		return bad("replicas %d exceeds nodes %d", p.Replicas, p.Nodes)
	case p.Domains < 0:
		return bad("domains %d must not be negative", p.Domains)
	case p.Policy != "" && !slices.Contains(Policies, p.Policy):
		return bad("policy %q is not one of %v", p.Policy, Policies)
	case p.Replicas > p.Nodes+p.AddNodes-p.RemoveNodes:
		return bad("replicas %d exceeds %d nodes left after adding %d and removing %d",
			p.Replicas, p.Nodes+p.AddNodes-p.RemoveNodes, p.AddNodes, p.RemoveNodes)
	}
	return nil
}

// Simulate places the initial layout, applies the node changes, re-plans and
// reports the re-plan. Only the re-plan is timed; the planner itself never
// reads the clock.
func Simulate(p SimulateParams) (SimulateResult, error) {
	if err := p.Validate(); err != nil {
		return SimulateResult{}, err
	}
	if p.Policy == "" {
		p.Policy = "spread"
	}
	node := func(i int) Node {
		n := Node{ID: fmt.Sprintf("node-%06d", i)}
		if p.Domains > 0 {
			n.Domain = fmt.Sprintf("zone-%d", i%p.Domains)
		}
		return n
	}
	c := Cluster{Want: make(map[ShardKey]int, p.Shards)}
	for i := range p.Nodes {
		c.Nodes = append(c.Nodes, node(i))
	}
	for i := range p.Shards {
		c.Want[ShardKey{DB: "sim", Shard: i}] = p.Replicas
	}
	s, err := NewSharder(p.Policy)
	if err != nil {
		return SimulateResult{}, err
	}
	Load(s, c)
	first, err := s.Rebalance()
	if err != nil {
		return SimulateResult{}, err
	}
	// The removed nodes are the last ones, the added ones sort after them:
	// ids carry no meaning to the planner, so which ones does not matter.
	c.Shards = first.Target
	for _, n := range c.Nodes[p.Nodes-p.RemoveNodes:] {
		s.UnregisterNode(n.ID)
	}
	c.Nodes = c.Nodes[:p.Nodes-p.RemoveNodes]
	for i := range p.AddNodes {
		c.Nodes = append(c.Nodes, node(p.Nodes+i))
		s.RegisterNode(c.Nodes[len(c.Nodes)-1])
	}
	bound := s.LowerBound()
	start := time.Now()
	second, err := s.Rebalance()
	elapsed := time.Since(start)
	if err != nil {
		return SimulateResult{}, err
	}
	res := SimulateResult{
		Policy:     p.Policy,
		Moves:      second.Relocations,
		LowerBound: bound,
		PlanMS:     float64(elapsed.Microseconds()) / 1000,
	}
	res.ReplicasPerNode, res.LeadersPerNode = Spread(c.Nodes, second.Target)
	res.DomainsPerShard = DomainsPerShard(c.Nodes, second.Target)
	return res, nil
}

// DomainsPerShard is the fewest and most failure domains of nodes that the
// replicas of a shard of target span.
func DomainsPerShard(nodes []Node, target map[ShardKey]ShardPlacement) MinMax {
	dom := map[string]string{}
	for _, n := range nodes {
		dom[n.ID] = domainOf(n)
	}
	spans := map[string]int{}
	for k, sp := range target {
		seen := map[string]bool{}
		for _, id := range sp.Replicas {
			seen[dom[id]] = true
		}
		spans[k.String()] = len(seen)
	}
	return minMax(spans)
}

// Spread returns the min and max replica and leader counts per non-draining
// node of nodes for the placement target.
func Spread(nodes []Node, target map[ShardKey]ShardPlacement) (replicas, leaders MinMax) {
	rc := map[string]int{}
	lc := map[string]int{}
	for _, n := range nodes {
		if !n.Draining {
			rc[n.ID], lc[n.ID] = 0, 0
		}
	}
	for _, sp := range target {
		for _, id := range sp.Replicas {
			if _, ok := rc[id]; ok {
				rc[id]++
			}
		}
		if _, ok := lc[sp.Leader]; ok {
			lc[sp.Leader]++
		}
	}
	return minMax(rc), minMax(lc)
}

func minMax(m map[string]int) MinMax {
	first := true
	var out MinMax
	for _, v := range m {
		if first {
			out = MinMax{v, v}
			first = false
			continue
		}
		out.Min, out.Max = min(out.Min, v), max(out.Max, v)
	}
	return out
}

// DomainsShort lists the shards of target with two replicas in one failure
// domain of nodes (spread never does that while there are enough domains).
// Operators see them as domain_constraint_unmet.
func DomainsShort(nodes []Node, target map[ShardKey]ShardPlacement) []ShardKey {
	dom := map[string]string{}
	for _, n := range nodes {
		dom[n.ID] = domainOf(n)
	}
	var out []ShardKey
	for k, sp := range target {
		seen := map[string]bool{}
		for _, id := range sp.Replicas {
			seen[dom[id]] = true
		}
		if len(seen) < len(dedup(sp.Replicas)) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}
