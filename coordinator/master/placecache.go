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
	// seenNodes: the cluster's live records, drain marks and failure-domain
	// label key last read, so a pass reads again only the nodes that
	// changed (a pass per publication must not cost every node).
	seenNodes struct {
		read    bool
		live    statemachine.Map[models.StorageNode]
		drained map[string]bool
		domain  string
	}
	looked int // nodes read by syncNodes, for the cost test
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
	pc.syncNodes(st, cluster)
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

// syncNodes brings the sharder's nodes to st's live nodes of cluster: on
// the first read, or when the cluster's failure-domain label key changed,
// every node; else only those whose record or drain mark changed since
// the last read.
func (pc *placeCache) syncNodes(st *statemachine.State, cluster string) {
	live := st.Nodes.At(cluster)
	domain := st.StorageClusters[cluster].FailureDomain
	dirty := map[string]bool{}
	mark := func(id string) { dirty[id] = true }
	if !pc.seenNodes.read || pc.seenNodes.domain != domain {
		for id := range pc.nodes {
			mark(id)
		}
		for id := range live.All() {
			mark(id)
		}
	} else {
		statemachine.Changed(pc.seenNodes.live, live, mark)
		for id := range st.Drains {
			if !pc.seenNodes.drained[id] {
				mark(id)
			}
		}
		for id := range pc.seenNodes.drained {
			if _, ok := st.Drains[id]; !ok {
				mark(id)
			}
		}
	}
	drained := make(map[string]bool, len(st.Drains))
	for id := range st.Drains {
		drained[id] = true
	}
	pc.seenNodes.read, pc.seenNodes.live, pc.seenNodes.drained, pc.seenNodes.domain = true, live, drained, domain
	for id := range dirty {
		pc.looked++
		n, ok := clusterNode(live, st.Drains, domain, id)
		old, had := pc.nodes[id]
		switch {
		case ok && (!had || old != n):
			pc.s.RegisterNode(n)
			pc.nodes[id] = n
		case !ok && had:
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
