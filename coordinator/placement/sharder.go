package placement

import (
	"fmt"
	"maps"
	"slices"
)

// Sharder keeps which nodes serve which partitions (shards) and plans
// changes to it: nodes and partitions are registered and unregistered, and
// Rebalance re-places the partitions under the sharder's policy with the
// fewest relocations it knows how to make. The master builds one per
// decision from its state, so a policy is a choice of constructor, not an
// edit of the master.
type Sharder interface {
	// Policy names the placement policy ("minmove", "spread", "hash").
	Policy() string
	// RegisterNode adds n, or updates it (draining, domain, weight).
	RegisterNode(n Node)
	// UnregisterNode forgets the node: its replicas are placed elsewhere by
	// the next Rebalance.
	UnregisterNode(id string)
	// RegisterPartition adds partition k wanting replicas copies, served
	// now by current (empty for a new partition), or updates it.
	RegisterPartition(k ShardKey, replicas int, current ShardPlacement)
	// UnregisterPartition drops k: the next plan removes its replicas.
	UnregisterPartition(k ShardKey)
	// Plan is what Rebalance would do; it changes nothing (a dry run).
	Plan() (Plan, error)
	// Rebalance plans and adopts the plan's target as the current placement.
	Rebalance() (Plan, error)
	// PlaceNew plans the partitions of add (they have no replicas yet)
	// next to the others, which it does not move; it adopts nothing
	// (Rebalance does). The plan's target holds at least the partitions of
	// add's databases.
	PlaceNew(add map[ShardKey]int) (Plan, error)
	// LowerBound is the fewest relocations a plan valid under the policy
	// needs from the current placement, as far as the policy can tell.
	LowerBound() int
	// Partitions lists the partitions node serves, in key order.
	Partitions(node string) []ShardKey
	// Nodes lists the nodes serving k.
	Nodes(k ShardKey) []string
	// Leader is the node leading k ("" if none).
	Leader(k ShardKey) string
}

// Policies are the names NewSharder accepts, the default first: "spread"
// (per-database, failure-domain and weight aware), "minmove" (Place:
// balanced over the cluster total only, the fewest moves) and "hash"
// (rendezvous hashing, for comparison).
var Policies = []string{"spread", "minmove", "hash"}

// NewSharder returns an empty sharder of the named policy.
func NewSharder(policy string) (Sharder, error) {
	switch policy {
	case "minmove":
		return NewMinMove(), nil
	case "spread":
		return NewSpread(), nil
	case "hash":
		return NewHashing(), nil
	}
	return nil, fmt.Errorf("placement: policy %q (want one of %v): %w", policy, Policies, ErrInvalidParams)
}

// NewMinMove is the sharder of Place: replicas and leaders balanced over the
// whole cluster (max - min <= 1 per node) with the fewest relocations.
func NewMinMove() Sharder {
	return &table{policy: "minmove", place: Place, placeNew: PlaceNew, bound: LowerBound}
}

// NewHashing places every partition by rendezvous hashing: each partition
// ranks the nodes by a weighted hash of (partition, node) and takes the best
// ones in distinct failure domains. It needs no state and moves only the
// replicas of nodes that come or go, but balances only statistically.
func NewHashing() Sharder {
	return &table{policy: "hash", place: PlaceHashed, bound: func(Cluster) int { return 0 },
		placeNew: func(c Cluster, add map[ShardKey]int) (Plan, error) {
			ext, err := extend(c, add)
			if err != nil {
				return Plan{}, err
			}
			return PlaceHashed(ext)
		}}
}

// Load registers every node and partition of c in s.
func Load(s Sharder, c Cluster) {
	for _, n := range c.Nodes {
		s.RegisterNode(n)
	}
	for k, want := range c.Want {
		s.RegisterPartition(k, want, c.Shards[k])
	}
	// Placed partitions that are no longer wanted: registered then dropped,
	// so the plan removes their replicas.
	for k, cur := range c.Shards {
		if _, ok := c.Want[k]; !ok {
			s.RegisterPartition(k, 1, cur)
			s.UnregisterPartition(k)
		}
	}
}

// table is the registry every sharder shares; place is its policy.
type table struct {
	policy   string
	place    func(Cluster) (Plan, error)
	placeNew func(Cluster, map[ShardKey]int) (Plan, error)
	// placeSub, when set, is PlaceNew given only the partitions of the new
	// ones' databases and the others' counts per node (placeSpreadSub).
	placeSub func(sub Cluster, others counts, add map[ShardKey]int) (Plan, error)
	bound    func(Cluster) int
	nodes    map[string]Node
	want     map[ShardKey]int
	current  map[ShardKey]ShardPlacement
	byNode   map[string][]ShardKey // built on demand, nil when stale
	// Kept as partitions come and go, so PlaceNew need not read them all:
	// the wanted partitions by database, and their replicas and leaders
	// per node.
	byDB  map[string]map[ShardKey]bool
	total counts
	// sorted: the nodes in id order, and index the spread planner's view
	// of them; nil when a node came, went or changed since they were
	// built, so a decision pays for the nodes only when they changed.
	sorted []Node
	index  *nodeIndex
}

func (t *table) init() {
	if t.nodes == nil {
		t.nodes = map[string]Node{}
		t.want = map[ShardKey]int{}
		t.current = map[ShardKey]ShardPlacement{}
		t.byDB = map[string]map[ShardKey]bool{}
	}
}

// forget takes k out of the per-database index and the counts.
func (t *table) forget(k ShardKey) {
	if _, ok := t.want[k]; !ok {
		return
	}
	t.total.add(t.current[k], -1)
	delete(t.byDB[k.DB], k)
	if len(t.byDB[k.DB]) == 0 {
		delete(t.byDB, k.DB)
	}
}

// remember puts wanted k into the per-database index and the counts.
func (t *table) remember(k ShardKey) {
	t.total.add(t.current[k], 1)
	if t.byDB[k.DB] == nil {
		t.byDB[k.DB] = map[ShardKey]bool{}
	}
	t.byDB[k.DB][k] = true
}

func (t *table) Policy() string { return t.policy }

func (t *table) RegisterNode(n Node) {
	t.init()
	if old, ok := t.nodes[n.ID]; !ok || old != n {
		t.sorted, t.index = nil, nil
	}
	t.nodes[n.ID] = n
}

func (t *table) UnregisterNode(id string) {
	t.init()
	if _, ok := t.nodes[id]; ok {
		t.sorted, t.index = nil, nil
	}
	delete(t.nodes, id)
}

// nodeList is the nodes in id order, with their spread index; callers must
// not change the slice.
func (t *table) nodeList() ([]Node, *nodeIndex) {
	if t.sorted == nil && len(t.nodes) > 0 {
		t.sorted = make([]Node, 0, len(t.nodes))
		for _, id := range slices.Sorted(maps.Keys(t.nodes)) {
			t.sorted = append(t.sorted, t.nodes[id])
		}
		t.index = newNodeIndex(t.sorted)
	}
	return t.sorted, t.index
}

func (t *table) RegisterPartition(k ShardKey, replicas int, current ShardPlacement) {
	t.init()
	t.forget(k)
	t.want[k] = replicas
	if len(current.Replicas) > 0 || current.Leader != "" {
		t.current[k] = ShardPlacement{Replicas: slices.Clone(current.Replicas), Leader: current.Leader}
	}
	t.remember(k)
	t.byNode = nil
}

func (t *table) UnregisterPartition(k ShardKey) {
	t.init()
	t.forget(k)
	delete(t.want, k)
	t.byNode = nil
}

func (t *table) cluster() Cluster {
	t.init()
	nodes, index := t.nodeList()
	return Cluster{Nodes: slices.Clone(nodes), Shards: t.current, Want: t.want, nodes: index}
}

func (t *table) Plan() (Plan, error) { return t.place(t.cluster()) }

func (t *table) Rebalance() (Plan, error) {
	p, err := t.Plan()
	if err != nil {
		return Plan{}, err
	}
	for k := range t.want {
		t.forget(k)
	}
	t.current = maps.Clone(p.Target)
	for k := range t.want {
		t.remember(k)
	}
	t.byNode = nil
	return p, nil
}

func (t *table) PlaceNew(add map[ShardKey]int) (Plan, error) {
	if t.placeSub == nil {
		return t.placeNew(t.cluster(), add)
	}
	t.init()
	nodes, index := t.nodeList()
	sub := Cluster{Nodes: nodes, Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}, nodes: index}
	others := counts{replicas: maps.Clone(t.total.replicas), leaders: maps.Clone(t.total.leaders)}
	dbs := map[string]bool{}
	for k := range add {
		dbs[k.DB] = true
	}
	for db := range dbs {
		for k := range t.byDB[db] {
			sub.Want[k] = t.want[k]
			if cur, ok := t.current[k]; ok {
				sub.Shards[k] = cur
			}
			others.add(t.current[k], -1)
		}
	}
	return t.placeSub(sub, others, add)
}

func (t *table) LowerBound() int { return t.bound(t.cluster()) }

func (t *table) Partitions(node string) []ShardKey {
	t.init()
	if t.byNode == nil {
		t.byNode = map[string][]ShardKey{}
		for _, k := range slices.SortedFunc(maps.Keys(t.current), compareKeys) {
			if _, wanted := t.want[k]; !wanted {
				continue
			}
			for _, id := range dedup(t.current[k].Replicas) {
				t.byNode[id] = append(t.byNode[id], k)
			}
		}
	}
	return slices.Clone(t.byNode[node])
}

func (t *table) Nodes(k ShardKey) []string {
	t.init()
	if _, ok := t.want[k]; !ok {
		return nil
	}
	return dedup(t.current[k].Replicas)
}

func (t *table) Leader(k ShardKey) string {
	t.init()
	if _, ok := t.want[k]; !ok {
		return ""
	}
	return t.current[k].Leader
}
