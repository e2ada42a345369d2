package master

import (
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// placeCache is one storage cluster's placement as this term last read it,
// registered in a sharder that outlives the decision: a database is read
// again only when its assignment, states or config changed since the
// snapshot last read (statemachine.Changed skips what two snapshots
// share), so placing a new database costs the nodes, the changes and that
// database, not every shard of the cluster (clusterView's cost).
type placeCache struct {
	s     placement.Sharder
	nodes map[string]placement.Node
	dbs   map[string][]placement.ShardKey // the partitions registered per database
	// pending: the databases registered from this term's own placements
	// (not shown by the state yet), by the revision of their write.
	pending map[string]int64
	// seen: the maps of the snapshot last read (read yet: whether there was
	// one).
	seen struct {
		read      bool
		assign    statemachine.Map[models.Assignment]
		states    statemachine.Map[models.ShardStates]
		databases statemachine.Map[models.Database]
	}
	// registered: partitions registered now; dropped: unregistered since
	// the cache started.
	registered, dropped int
}

func newPlaceCache() *placeCache {
	return &placeCache{s: newSharder(), nodes: map[string]placement.Node{}, dbs: map[string][]placement.ShardKey{}, pending: map[string]int64{}}
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
	dirty := map[string]bool{}
	mark := func(name string) { dirty[name] = true }
	if !pc.seen.read {
		for name := range st.Assignments.All() {
			mark(name)
		}
	} else {
		statemachine.Changed(pc.seen.assign, st.Assignments, mark)
		statemachine.Changed(pc.seen.states, st.ShardStates, mark)
		statemachine.Changed(pc.seen.databases, st.Databases, mark)
	}
	pc.seen.read, pc.seen.assign, pc.seen.states, pc.seen.databases = true, st.Assignments, st.ShardStates, st.Databases
	for name, rev := range pc.pending {
		if p, ok := placed[name]; !ok || p.rev != rev || p.assign.Cluster != cluster {
			mark(name)
		}
	}
	for name, p := range placed {
		if rev, ok := pc.pending[name]; p.assign.Cluster == cluster && (!ok || rev != p.rev) {
			mark(name)
		}
	}
	for name := range dirty {
		pc.syncDB(st, cluster, placed, name)
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

// syncDB registers database name's shards on cluster again: this term's
// placement of it if the state does not show that yet, else the state's;
// none if it is not on cluster (any more).
func (pc *placeCache) syncDB(st *statemachine.State, cluster string, placed map[string]ownPlacement, name string) {
	var shards []keyedShard
	rf := 0
	delete(pc.pending, name)
	if p, ok := placed[name]; ok && p.assign.Cluster == cluster {
		shards, rf = dbShards(name, p.assign, p.states), p.db.ReplicaFactor
		pc.pending[name] = p.rev
	} else if a, ok := st.Assignments.Get(name); ok && a.Cluster == cluster {
		if db, ok := st.Databases.Get(name); ok {
			shards, rf = dbShards(name, a, st.ShardStates.At(name)), db.ReplicaFactor
		}
	}
	old := pc.dbs[name]
	keys := make([]placement.ShardKey, 0, len(shards))
	now := make(map[placement.ShardKey]bool, len(shards))
	for _, sh := range shards {
		pc.s.RegisterPartition(sh.key, rf, sh.at)
		keys = append(keys, sh.key)
		now[sh.key] = true
	}
	for _, k := range old {
		if !now[k] {
			pc.s.UnregisterPartition(k)
			pc.dropped++
		}
	}
	pc.registered += len(keys) - len(old)
	if len(keys) == 0 {
		delete(pc.dbs, name)
		return
	}
	pc.dbs[name] = keys
}
