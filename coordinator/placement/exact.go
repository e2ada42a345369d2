package placement

import "slices"

// exactLimit caps shards x nodes for the exact solver: successive shortest
// paths over the full bipartite graph is fine for small clusters only.
const exactLimit = 4096

// exactRelocations solves placement exactly as a min-cost flow over the full
// shard x node graph (source -> shard -> node -> sink, nodes capped at q plus
// r shared q+1 slots). It does not build the placement, only its cost, and it
// shares no code with Place, so it doubles as a check on it.
func exactRelocations(p *planner) int {
	n := len(p.nodeIDs)
	total := p.total
	// Vertices: 0 source, 1 sink, 2 the shared q+1 slots, shards, nodes.
	g := &flowGraph{}
	g.init(3 + len(p.shards) + n)
	node := func(v int) int { return 3 + len(p.shards) + v }
	for i := range p.shards {
		s := &p.shards[i]
		g.edge(0, 3+i, s.want, 0)
		for v, id := range p.nodeIDs {
			cost := 1 // keeping a current replica is free, anything else costs
			if slices.Contains(s.cur, id) {
				cost = 0
			}
			g.edge(3+i, node(v), 1, cost)
		}
	}
	// q per node plus r shared slots sum to exactly total, so a maximum
	// flow fills every node to at least q: balance needs no lower bounds.
	for v := range n {
		g.edge(node(v), 1, total/n, 0)
		g.edge(node(v), 2, 1, 0)
	}
	g.edge(2, 1, total%n, 0)
	_, cost := g.minCostFlow(0, 1)
	kept := total - cost
	return p.mustHave() - kept
}

type flowEdge struct{ to, cap, cost, rev int }

type flowGraph struct{ adj [][]flowEdge }

func (g *flowGraph) init(n int) { g.adj = make([][]flowEdge, n) }

func (g *flowGraph) edge(a, b, capacity, cost int) {
	g.adj[a] = append(g.adj[a], flowEdge{b, capacity, cost, len(g.adj[b])})
	g.adj[b] = append(g.adj[b], flowEdge{a, 0, -cost, len(g.adj[a]) - 1})
}

// minCostFlow pushes as much flow as possible along successive shortest
// paths (Bellman-Ford with a queue, since residual costs go negative) and
// returns the flow and its cost.
func (g *flowGraph) minCostFlow(s, t int) (flow, cost int) {
	n := len(g.adj)
	for {
		dist := make([]int, n)
		inQ := make([]bool, n)
		prevV := make([]int, n)
		prevE := make([]int, n)
		for i := range dist {
			dist[i] = 1 << 60
		}
		dist[s] = 0
		q := []int{s}
		for len(q) > 0 {
			x := q[0]
			q = q[1:]
			inQ[x] = false
			for i, e := range g.adj[x] {
				if e.cap > 0 && dist[x]+e.cost < dist[e.to] {
					dist[e.to] = dist[x] + e.cost
					prevV[e.to], prevE[e.to] = x, i
					if !inQ[e.to] {
						inQ[e.to] = true
						q = append(q, e.to)
					}
				}
			}
		}
		if dist[t] == 1<<60 {
			return flow, cost
		}
		push := 1 << 60
		for v := t; v != s; v = prevV[v] {
			push = min(push, g.adj[prevV[v]][prevE[v]].cap)
		}
		for v := t; v != s; v = prevV[v] {
			e := &g.adj[prevV[v]][prevE[v]]
			e.cap -= push
			g.adj[v][e.rev].cap += push
		}
		flow += push
		cost += push * dist[t]
	}
}
