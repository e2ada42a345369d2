package master

import (
	"slices"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// clusterView builds placement's picture of one storage cluster: its live
// nodes (draining ones flagged), the current replicas of every shard placed
// on it and the replica count each shard wants.
func clusterView(st *statemachine.State, cluster string) placement.Cluster {
	c := placement.Cluster{Shards: map[placement.ShardKey]placement.ShardPlacement{}, Want: map[placement.ShardKey]int{}}
	ids := st.Nodes.At(cluster).Keys()
	for _, id := range ids {
		_, d := st.Drains[id]
		c.Nodes = append(c.Nodes, placement.Node{ID: id, Draining: d})
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

// newShards places shards [from, to) of db on its cluster, balanced with
// everything already there. It returns their assignments and initial states.
func newShards(st *statemachine.State, db models.Database, from, to int) ([]models.ShardAssignment, []models.ShardState, error) {
	return newShardsOn(clusterView(st, db.StorageCluster), db, from, to)
}

// newShardsOn is newShards on the view c of db's cluster.
func newShardsOn(c placement.Cluster, db models.Database, from, to int) ([]models.ShardAssignment, []models.ShardState, error) {
	add := map[placement.ShardKey]int{}
	for i := from; i < to; i++ {
		add[placement.ShardKey{DB: db.Name, Shard: i}] = db.ReplicaFactor
	}
	plan, err := placement.PlaceNew(c, add)
	if err != nil {
		return nil, nil, err
	}
	var as []models.ShardAssignment
	var ss []models.ShardState
	for i := from; i < to; i++ {
		t := plan.Target[placement.ShardKey{DB: db.Name, Shard: i}]
		as = append(as, models.ShardAssignment{ID: i, Replicas: t.Replicas})
		ss = append(ss, models.ShardState{ID: i, Leader: t.Leader, Term: 1, Status: models.StatusOnline})
	}
	return as, ss, nil
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
