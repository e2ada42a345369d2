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
	s := newSharder()
	placement.Load(s, c)
	p, err := s.Plan()
	return p, s, err
}

// placeNew is the plan for c with the shards of add placed (none of them
// has replicas yet) next to the others, which it does not move.
func placeNew(c placement.Cluster, add map[placement.ShardKey]int) (placement.Plan, error) {
	s := newSharder()
	placement.Load(s, c)
	return s.PlaceNew(add)
}

// clusterView builds placement's picture of one storage cluster: its live
// nodes (draining ones flagged, with their failure domain, the value of the
// cluster's failure_domain label, and weight), the current replicas of every
// shard placed on it and the replica count each shard wants.
func clusterView(st *statemachine.State, cluster string) placement.Cluster {
	c := placement.Cluster{Shards: map[placement.ShardKey]placement.ShardPlacement{}, Want: map[placement.ShardKey]int{}}
	live := st.Nodes.At(cluster)
	domain := st.StorageClusters[cluster].FailureDomain
	for _, id := range live.Keys() {
		_, d := st.Drains[id]
		n := placement.Node{ID: id, Draining: d}
		if rec, ok := live.Get(id); ok {
			n.Weight = rec.Weight
			if domain != "" {
				n.Domain = rec.Labels[domain]
			}
		}
		c.Nodes = append(c.Nodes, n)
	}
	for name, a := range st.Assignments.All() {
		db, ok := st.Databases.Get(name)
		if !ok || a.Cluster != cluster {
			continue
		}
		leaders := map[int]string{}
		for _, s := range st.ShardStates.At(name).Shards {
			if s.Status == models.StatusOnline {
				leaders[s.ID] = s.Leader
			}
		}
		for _, sh := range a.Shards {
			k := placement.ShardKey{DB: name, Shard: sh.ID}
			c.Shards[k] = placement.ShardPlacement{Replicas: slices.Clone(sh.Replicas), Leader: leaders[sh.ID]}
			c.Want[k] = db.ReplicaFactor
		}
	}
	return c
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
