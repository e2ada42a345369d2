package master

import (
	"sync"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// maxAddrsPerCluster bounds the addresses remembered per storage cluster
// (live nodes are always kept; departed ones are forgotten past it).
const maxAddrsPerCluster = 16384

// Moves tracks storage nodes whose node id registered again at another
// address (a real move: the old holder's lease is gone, or the id would
// have been refused). The master treats it as the node leaving and joining:
// every shard it is a replica of is published again at a new term, the
// leader chosen by the usual rule, so no follower, broker or in-sync upkeep
// keeps going by the old incarnation. A master candidate keeps one for its
// whole life and feeds it every state it sees (Observe), master or not: a
// move that happens while no master runs, or across a change of master, is
// still noticed by the next term. Safe for concurrent use.
type Moves struct {
	mu      sync.Mutex
	addrs   map[string]map[string]string          // cluster -> node -> address last seen
	pending map[string]map[string]map[string]bool // cluster -> moved node -> databases already republished
	seen    map[string]statemachine.Map[models.StorageNode]
}

// NewMoves returns an empty tracker.
func NewMoves() *Moves {
	return &Moves{addrs: map[string]map[string]string{}, pending: map[string]map[string]map[string]bool{},
		seen: map[string]statemachine.Map[models.StorageNode]{}}
}

// Observe notes the live nodes' addresses in st and returns the nodes that
// registered at another address since the last call, per cluster.
func (mv *Moves) Observe(st *statemachine.State) map[string][]string {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	var out map[string][]string
	if st.FromBackup {
		return nil // addresses from the local backup file may be long gone
	}
	for cluster, nodes := range st.Nodes.All() {
		if !st.Synced[statemachine.ClusterNodesSource(cluster)] || sameNodes(mv.seen[cluster], nodes) {
			continue
		}
		mv.seen[cluster] = nodes
		addrs := mv.addrs[cluster]
		if addrs == nil {
			addrs = map[string]string{}
			mv.addrs[cluster] = addrs
		}
		for _, id := range nodes.Keys() {
			n := nodes.At(id)
			prev, known := addrs[id]
			addrs[id] = n.NodeAddress
			if !known || prev == n.NodeAddress || n.NodeAddress == "" {
				continue
			}
			if mv.pending[cluster] == nil {
				mv.pending[cluster] = map[string]map[string]bool{}
			}
			mv.pending[cluster][id] = map[string]bool{}
			if out == nil {
				out = map[string][]string{}
			}
			out[cluster] = append(out[cluster], id)
		}
		if len(addrs) > maxAddrsPerCluster {
			for id := range addrs {
				if !nodes.Has(id) {
					delete(addrs, id)
				}
			}
		}
	}
	return out
}

// sameNodes: the live node maps hold the same addresses (the same map when a
// state shares it unchanged between publications).
func sameNodes(a, b statemachine.Map[models.StorageNode]) bool {
	if a.Len() != b.Len() || a.Len() == 0 {
		return false
	}
	if a.Same(b) {
		return true
	}
	for id, n := range a.All() {
		if o, ok := b.Get(id); !ok || o.NodeAddress != n.NodeAddress {
			return false
		}
	}
	return true
}

// movedFor lists the moved nodes of cluster whose shards of db are not yet
// republished.
func (mv *Moves) movedFor(cluster, db string) map[string]bool {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	var out map[string]bool
	for id, done := range mv.pending[cluster] {
		if !done[db] {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// republished records that db's shards were republished for the moved nodes.
func (mv *Moves) republished(cluster, db string, nodes map[string]bool) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	for id := range nodes {
		if done := mv.pending[cluster][id]; done != nil {
			done[db] = true
		}
	}
}

// movedReplica: one of the shard's replicas moved and the shard, online, was
// not yet published again since.
func movedReplica(in ShardInputs, sh models.ShardAssignment, st models.ShardState) bool {
	if len(in.Moved) == 0 || st.Status != models.StatusOnline {
		return false
	}
	for _, n := range sh.Replicas {
		if in.Moved[n] {
			return true
		}
	}
	return false
}

// noteMoves logs the nodes that moved since the last pass.
func (m *Master) noteMoves(st *statemachine.State) {
	for cluster, ids := range m.moves.Observe(st) {
		for _, id := range ids {
			m.lg.Info("storage node registered again at another address; its shards get new terms",
				zap.String("cluster", cluster), zap.String("node_id", id), zap.String("address", st.Nodes.At(cluster).At(id).NodeAddress))
		}
	}
}
