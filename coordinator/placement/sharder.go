package placement

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sync"
)

// Sharder maps P partitions onto N nodes, in the style of Shardz. Both
// implementations are safe for concurrent use.
type Sharder interface {
	RegisterNode(id string)
	UnregisterNode(id string)
	RegisterPartition(p ShardKey, replicas int)
	UnregisterPartition(p ShardKey)
	// NodesFor returns the nodes serving a partition, sorted.
	NodesFor(p ShardKey) []string
	// PartitionsFor returns the partitions a node serves, sorted.
	PartitionsFor(node string) []ShardKey
}

// lookupSharder keeps an explicit table and re-plans it with Place on every
// change, so each change moves as few replicas as balance allows.
type lookupSharder struct {
	mu     sync.Mutex
	nodes  map[string]bool
	want   map[ShardKey]int
	table  map[ShardKey]ShardPlacement
	byNode map[string][]ShardKey
}

// NewLookupSharder returns the default Sharder: a lookup table kept balanced
// (replicas per node differ by at most one) with minimal movement.
//
// A partition that wants more replicas than there are nodes gets one replica
// per node until more nodes register; an empty sharder serves nothing.
func NewLookupSharder() Sharder {
	return &lookupSharder{
		nodes: map[string]bool{},
		want:  map[ShardKey]int{},
		table: map[ShardKey]ShardPlacement{},
	}
}

func (l *lookupSharder) RegisterNode(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes[id] = true
	l.replan()
}

func (l *lookupSharder) UnregisterNode(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.nodes, id)
	l.replan()
}

func (l *lookupSharder) RegisterPartition(p ShardKey, replicas int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.want[p] = max(replicas, 1)
	l.replan()
}

func (l *lookupSharder) UnregisterPartition(p ShardKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.want, p)
	l.replan()
}

func (l *lookupSharder) NodesFor(p ShardKey) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.table[p].Replicas)
	slices.Sort(out)
	return out
}

func (l *lookupSharder) PartitionsFor(node string) []ShardKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byNode[node])
}

func (l *lookupSharder) replan() {
	c := Cluster{Shards: l.table, Want: make(map[ShardKey]int, len(l.want))}
	for id := range l.nodes {
		c.Nodes = append(c.Nodes, Node{ID: id})
	}
	l.byNode = map[string][]ShardKey{}
	if len(l.nodes) == 0 {
		l.table = map[ShardKey]ShardPlacement{}
		return
	}
	for k, r := range l.want {
		c.Want[k] = min(r, len(l.nodes))
	}
	plan, err := Place(c)
	if err != nil {
		// Unreachable: replica counts are capped at the node count above.
		// Keeping the old table is the safe answer if it ever happens.
		return
	}
	l.table = plan.Target
	for k, sp := range l.table {
		for _, id := range sp.Replicas {
			l.byNode[id] = append(l.byNode[id], k)
		}
	}
	for id := range l.byNode {
		slices.SortFunc(l.byNode[id], compareKeys)
	}
}

// hashSharder places by rendezvous (highest random weight) hashing: a
// partition lives on the R nodes with the highest hash(node, partition). It
// keeps no table, so any process with the same node list agrees, and a node
// change only moves the partitions that node wins or loses; but per-node
// counts are only balanced on average.
type hashSharder struct {
	mu    sync.Mutex
	nodes map[string]bool
	want  map[ShardKey]int
}

// NewHashSharder returns a rendezvous-hashing Sharder.
func NewHashSharder() Sharder {
	return &hashSharder{nodes: map[string]bool{}, want: map[ShardKey]int{}}
}

func (h *hashSharder) RegisterNode(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes[id] = true
}

func (h *hashSharder) UnregisterNode(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nodes, id)
}

func (h *hashSharder) RegisterPartition(p ShardKey, replicas int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.want[p] = max(replicas, 1)
}

func (h *hashSharder) UnregisterPartition(p ShardKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.want, p)
}

func (h *hashSharder) NodesFor(p ShardKey) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.want[p]
	if !ok {
		return nil
	}
	return h.top(p, r)
}

func (h *hashSharder) PartitionsFor(node string) []ShardKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.nodes[node] {
		return nil
	}
	var out []ShardKey
	for p, r := range h.want {
		if slices.Contains(h.top(p, r), node) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// top returns the r highest-weight nodes for p, sorted by id.
func (h *hashSharder) top(p ShardKey, r int) []string {
	type scored struct {
		id string
		w  uint64
	}
	all := make([]scored, 0, len(h.nodes))
	for id := range h.nodes {
		all = append(all, scored{id, weight(id, p)})
	}
	slices.SortFunc(all, func(a, b scored) int {
		if a.w != b.w {
			if a.w > b.w {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]string, 0, min(r, len(all)))
	for _, s := range all[:min(r, len(all))] {
		out = append(out, s.id)
	}
	slices.Sort(out)
	return out
}

// weight is a fixed hash (FNV-1a finished with a splitmix64 mix, since FNV
// alone spreads short similar keys poorly), so weights agree across processes.
func weight(node string, p ShardKey) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(p.DB))
	var b [9]byte
	binary.BigEndian.PutUint64(b[1:], uint64(p.Shard))
	h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
