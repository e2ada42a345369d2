package master

import (
	"slices"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// newSharder is the placement policy of every decision: spread (per
// database and over the cluster total, across the failure domain when the
// cluster has one, in proportion to weights). Minmove balances only the
// totals, which can put all of one database on one node (issue 24's g/x/web,
// TestRebalanceSpreadsEachDatabase).
func newSharder() placement.Sharder {
	return placement.NewSpread()
}

// planFor is the sharder's plan for c.
func planFor(c placement.Cluster) (placement.Plan, placement.Sharder, error) {
	s := loaded(c)
	p, err := s.Plan()
	return p, s, err
}

// loaded is a sharder holding c.
func loaded(c placement.Cluster) placement.Sharder {
	s := newSharder()
	placement.Load(s, c)
	return s
}

// clusterView builds placement's picture of one storage cluster: its live
// nodes (clusterNodes), the current replicas of every shard placed on it and
// the replica count each shard wants.
func clusterView(st *statemachine.State, cluster string) placement.Cluster {
	c := placement.Cluster{Nodes: clusterNodes(st, cluster), Shards: map[placement.ShardKey]placement.ShardPlacement{}, Want: map[placement.ShardKey]int{}}
	for name, a := range st.Assignments.All() {
		db, ok := st.Databases.Get(name)
		if !ok || a.Cluster != cluster {
			continue
		}
		for _, p := range dbShards(name, a, st.ShardStates.At(name)) {
			c.Shards[p.key] = p.at
			c.Want[p.key] = db.ReplicaFactor
		}
	}
	return c
}

// clusterNodes are the live nodes of cluster as placement sees them:
// draining ones flagged, with their failure domain (the value of the
// cluster's failure_domain label) and weight.
func clusterNodes(st *statemachine.State, cluster string) []placement.Node {
	var out []placement.Node
	live := st.Nodes.At(cluster)
	domain := st.StorageClusters[cluster].FailureDomain
	for _, id := range live.Keys() {
		n, _ := clusterNode(live, st.Drains, domain, id)
		out = append(out, n)
	}
	return out
}

// clusterNode is node id as placement sees it, from the cluster's live
// records, the drain marks and the cluster's failure-domain label key;
// false when id is not live.
func clusterNode(live statemachine.Map[models.StorageNode], drains map[string]models.Drain, domain, id string) (placement.Node, bool) {
	rec, ok := live.Get(id)
	if !ok {
		return placement.Node{}, false
	}
	_, d := drains[id]
	n := placement.Node{ID: id, Draining: d, Weight: rec.Weight}
	if domain != "" {
		n.Domain = rec.Labels[domain]
	}
	return n, true
}

type keyedShard struct {
	key placement.ShardKey
	at  placement.ShardPlacement
}

// dbShards is where the shards of database db (assignment a, states ss)
// are: their replicas, and their leader when the shard is online.
func dbShards(db string, a models.Assignment, ss models.ShardStates) []keyedShard {
	leaders := map[int]string{}
	for _, s := range ss.Shards {
		if s.Status == models.StatusOnline {
			leaders[s.ID] = s.Leader
		}
	}
	out := make([]keyedShard, 0, len(a.Shards))
	for _, sh := range a.Shards {
		out = append(out, keyedShard{placement.ShardKey{DB: db, Shard: sh.ID},
			placement.ShardPlacement{Replicas: slices.Clone(sh.Replicas), Leader: leaders[sh.ID]}})
	}
	return out
}

// shardInSync reports whether every replica in want is in the shard's in-sync
// set at the current term (or the shard never published one).
func shardInSync(st *statemachine.State, cluster, db string, shard int, want []string) bool {
	if !isrTrusted(ShardInputs{DB: db, Live: st.Nodes.At(cluster), ISR: st.ISR.At(cluster),
		ClusterID: st.ListedFrom[statemachine.ClusterISRSource(cluster)]}, models.ShardAssignment{ID: shard}) {
		return false // a stale record (a restore) vouches for nobody
	}
	set, ok := st.ISR.At(cluster).Get(models.ShardID(db, shard))
	if !ok {
		return true
	}
	// A set from an older term still bounds who holds the data: a new leader
	// only shrinks it until it publishes its own.
	return subset(want, set.Replicas)
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
