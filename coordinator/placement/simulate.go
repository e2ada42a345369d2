package placement

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidParams means Simulate was given parameters it cannot run.
var ErrInvalidParams = errors.New("invalid simulate parameters")

// SimulateParams describes a what-if: P shards x R replicas placed on N nodes,
// then AddNodes empty nodes join and RemoveNodes of the original nodes leave.
type SimulateParams struct {
	Nodes, Shards, Replicas, AddNodes, RemoveNodes int
}

// MinMax is a spread of per-node counts.
type MinMax struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// SimulateResult reports the second (re-)plan of a simulation.
type SimulateResult struct {
	Moves           int     `json:"moves"`
	LowerBound      int     `json:"lower_bound"`
	ReplicasPerNode MinMax  `json:"replicas_per_node"`
	LeadersPerNode  MinMax  `json:"leaders_per_node"`
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
	c := Cluster{Want: make(map[ShardKey]int, p.Shards)}
	for i := range p.Nodes {
		c.Nodes = append(c.Nodes, Node{ID: fmt.Sprintf("node-%06d", i)})
	}
	for i := range p.Shards {
		c.Want[ShardKey{DB: "sim", Shard: i}] = p.Replicas
	}
	first, err := Place(c)
	if err != nil {
		return SimulateResult{}, err
	}
	// The removed nodes are the last ones, the added ones sort after them:
	// ids carry no meaning to the planner, so which ones does not matter.
	c.Shards = first.Target
	c.Nodes = c.Nodes[:p.Nodes-p.RemoveNodes]
	for i := range p.AddNodes {
		c.Nodes = append(c.Nodes, Node{ID: fmt.Sprintf("node-%06d", p.Nodes+i)})
	}
	start := time.Now()
	second, err := Place(c)
	elapsed := time.Since(start)
	if err != nil {
		return SimulateResult{}, err
	}
	res := SimulateResult{
		Moves:      second.Relocations,
		LowerBound: LowerBound(c),
		PlanMS:     float64(elapsed.Microseconds()) / 1000,
	}
	res.ReplicasPerNode, res.LeadersPerNode = Spread(c.Nodes, second.Target)
	return res, nil
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
