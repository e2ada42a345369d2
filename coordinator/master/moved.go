package master

import (
	"fmt"
	"maps"
	"slices"
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
	looked  int // node records looked at, for the cost test
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
		prev, seen := mv.seen[cluster]
		if !st.Synced[statemachine.ClusterNodesSource(cluster)] || (seen && prev.Same(nodes)) {
			continue
		}
		mv.seen[cluster] = nodes
		addrs := mv.addrs[cluster]
		if addrs == nil {
			addrs = map[string]string{}
			mv.addrs[cluster] = addrs
		}
		var moved []string
		note := func(id string) {
			mv.looked++
			n, live := nodes.Get(id)
			if !live {
				return // gone: its last address is kept for its return
			}
			was, known := addrs[id]
			addrs[id] = n.NodeAddress
			if !known || was == n.NodeAddress || n.NodeAddress == "" {
				return
			}
			if mv.pending[cluster] == nil {
				mv.pending[cluster] = map[string]map[string]bool{}
			}
			mv.pending[cluster][id] = map[string]bool{}
			moved = append(moved, id)
		}
		// Only the records that changed since the last look: a node record
		// rewritten (its report) costs its own check, not one per live node
		// (1,000 of them on every publication while databases are placed).
		if seen {
			statemachine.Changed(prev, nodes, note)
		} else {
			for id := range nodes.All() {
				note(id)
			}
		}
		if len(moved) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[cluster] = slices.Compact(slices.Sorted(slices.Values(moved)))
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

// movedCandidates keeps, of a shard's leader candidates, the ones whose log
// can be trusted to hold every acknowledged write. A replica that moved is
// a new incarnation of its node id: its data dir may be a copy taken at any
// moment (an operator's cp of a running node, a restored disk image), so its
// place in the in-sync set proves nothing about its log. It competes only
// on its answer, compared with every other live candidate's (all answered);
// when another candidate did not answer, it is left out and they compete.
// When only moved replicas are live and the in-sync set names others, the
// shard waits for one of them (wait says why); a set of the moved replicas
// alone (RF 1, or a shrunk set) keeps them: no other copy exists.
func movedCandidates(in ShardInputs, sh models.ShardAssignment, cands []string) (out []string, wait string) {
	if len(in.Moved) == 0 {
		return cands, ""
	}
	var moved, others []string
	for _, c := range cands {
		if in.Moved[c] {
			moved = append(moved, c)
		} else {
			others = append(others, c)
		}
	}
	switch {
	case len(moved) == 0:
		return cands, ""
	case len(others) > 0:
		if in.Answers == nil || len(unanswered(in, sh.ID, others)) > 0 {
			return others, ""
		}
		for _, m := range moved {
			if _, ok := in.Answers[sh.ID][m]; ok {
				others = append(others, m)
			}
		}
		return others, ""
	}
	var away []string
	for _, n := range inSync(in, sh) {
		if !in.Moved[n] {
			away = append(away, n)
		}
	}
	if len(away) == 0 {
		return cands, ""
	}
	return nil, fmt.Sprintf("only replicas that registered again at another address are live (%v): their data dir may be a copy "+
		"older than the acknowledged writes; waiting for an in-sync replica of %v; to accept losing the writes only they hold, "+
		"POST /api/v1/databases/%s/shards/%d/leader with {\"node_id\":\"<live replica>\",\"unclean\":true}", moved, away, in.DB, sh.ID)
}

// waitedOut is the moved nodes of in whose republication of the database is
// over in states: none of their shards is offline. An offline shard holding
// a moved replica may be waiting for an in-sync replica that did not move
// (movedCandidates); the move stays pending for it, or the next pass would
// trust the moved replica's log by its place in the in-sync set.
func waitedOut(in ShardInputs, states models.ShardStates) map[string]bool {
	if len(in.Moved) == 0 {
		return nil
	}
	out := maps.Clone(in.Moved)
	replicas := map[int][]string{}
	for _, sh := range in.Assign.Shards {
		replicas[sh.ID] = sh.Replicas
	}
	for _, s := range states.Shards {
		if s.Status == models.StatusOnline {
			continue
		}
		for _, n := range replicas[s.ID] {
			delete(out, n)
		}
	}
	return out
}
