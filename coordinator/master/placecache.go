package master

import (
	"slices"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/statemachine"
)

// placeCache is one storage cluster's placement as this term last read it,
// registered in a sharder that outlives the decision: a database is read
// again only when its assignment, states or config changed (their mod
// revisions), so placing a new database costs the nodes and that database,
// not every shard of the cluster (clusterView's cost, once per decision).
type placeCache struct {
	s     placement.Sharder
	nodes map[string]placement.Node
	dbs   map[string]placeMark
	// registered: partitions registered now; dropped: unregistered since
	// the cache started.
	registered, dropped int
}

// placeMark is what a database was registered from: the mod revisions of
// its assignment, states and config (a pending placement of this term: the
// negated revision of its write; 0, unknown, is read again every time),
// and the partitions registered.
type placeMark struct {
	revs [3]int64
	keys []placement.ShardKey
}

func newPlaceCache() *placeCache {
	return &placeCache{s: newSharder(), nodes: map[string]placement.Node{}, dbs: map[string]placeMark{}}
}

// maxDropped bounds the partitions of dropped databases a cache's sharder
// may still remember (Sharder.UnregisterPartition keeps their replicas for
// the plan that removes them) beyond those it places: past it, the cache
// starts again from the state.
const maxDropped = 4096

// sync brings the cache to st's placement of cluster, with placed (this
// term's own placements the state does not show yet) over it, and returns
// its sharder.
func (pc *placeCache) sync(st *statemachine.State, cluster string, placed map[string]ownPlacement) placement.Sharder {
	if pc.dropped > maxDropped+pc.registered {
		*pc = *newPlaceCache()
	}
	pc.syncNodes(clusterNodes(st, cluster))
	present := map[string]bool{}
	for name, p := range placed {
		if p.assign.Cluster == cluster {
			present[name] = true
			rev := -p.rev
			pc.syncDB(name, [3]int64{rev, rev, rev}, p.db.ReplicaFactor, func() []keyedShard { return dbShards(name, p.assign, p.states) })
		}
	}
	for name, a := range st.Assignments.All() {
		db, ok := st.Databases.Get(name)
		if !ok || a.Cluster != cluster || present[name] {
			continue
		}
		present[name] = true
		revs := [3]int64{st.ModRev(statemachine.SourceAssign, name), st.ModRev(statemachine.SourceShardState, name),
			st.ModRev(statemachine.SourceDatabaseConfig, name)}
		pc.syncDB(name, revs, db.ReplicaFactor, func() []keyedShard { return dbShards(name, a, st.ShardStates.At(name)) })
	}
	for name, mark := range pc.dbs {
		if !present[name] {
			for _, k := range mark.keys {
				pc.s.UnregisterPartition(k)
			}
			pc.registered -= len(mark.keys)
			pc.dropped += len(mark.keys)
			delete(pc.dbs, name)
		}
	}
	return pc.s
}

func (pc *placeCache) syncNodes(nodes []placement.Node) {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.ID] = true
		if old, ok := pc.nodes[n.ID]; !ok || old != n {
			pc.s.RegisterNode(n)
			pc.nodes[n.ID] = n
		}
	}
	for id := range pc.nodes {
		if !live[id] {
			pc.s.UnregisterNode(id)
			delete(pc.nodes, id)
		}
	}
}

// syncDB registers a database's shards (read) again unless they were
// registered at revs already.
func (pc *placeCache) syncDB(name string, revs [3]int64, rf int, read func() []keyedShard) {
	old, ok := pc.dbs[name]
	if ok && old.revs == revs && !slices.Contains(revs[:], 0) {
		return
	}
	shards := read()
	mark := placeMark{revs: revs, keys: make([]placement.ShardKey, 0, len(shards))}
	now := make(map[placement.ShardKey]bool, len(shards))
	for _, sh := range shards {
		pc.s.RegisterPartition(sh.key, rf, sh.at)
		mark.keys = append(mark.keys, sh.key)
		now[sh.key] = true
	}
	for _, k := range old.keys {
		if !now[k] {
			pc.s.UnregisterPartition(k)
			pc.dropped++
		}
	}
	pc.registered += len(mark.keys) - len(old.keys)
	pc.dbs[name] = mark
}
