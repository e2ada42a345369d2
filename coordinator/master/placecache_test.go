package master

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The cache a term places with, moved along random changes of the state
// (databases created, re-placed, re-led, dropped, moved to another
// cluster; nodes joining, leaving, draining; this term's own placements not
// shown yet), holds what a view read afresh holds and places a new
// database exactly as it would.
func TestPlaceCacheFollowsTheState(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		Databases: statemachine.MapOf(map[string]models.Database{}), Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}), Drains: map[string]models.Drain{},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c"}}}
	rev := int64(0) // the revision of this term's last write
	addNode := func(i int) {
		id := fmt.Sprintf("n%02d", i)
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id, Cluster: "c", Labels: map[string]string{"zone": fmt.Sprint(i % 3)}})
	}
	for i := range 6 {
		addNode(i)
	}
	put := func(db models.Database, p []ownPlacement) {
		st.Databases = st.Databases.Set(db.Name, db)
		st.Assignments = st.Assignments.Set(db.Name, p[0].assign)
		st.ShardStates = st.ShardStates.Set(db.Name, p[0].states)
	}
	pc := newPlaceCache()
	placed := map[string]ownPlacement{}
	next := 0
	for step := range 60 {
		names := st.Assignments.Keys()
		switch op := rng.Intn(10); {
		case op <= 2 || len(names) == 0: // a new database, placed through the cache
			db := models.Database{Name: fmt.Sprintf("db%02d", next), StorageCluster: "c", NumShards: 1 + rng.Intn(6), ReplicaFactor: 1 + rng.Intn(3)}
			next++
			p, err := placeBatch(pc.sync(st, "c", placed), []growth{{db: db}})
			require.NoError(t, err)
			if rng.Intn(3) == 0 { // written, not shown yet
				rev++
				p[0].rev, p[0].db = rev, db
				placed[db.Name] = p[0]
				break
			}
			put(db, p)
		case op == 3: // a leader moves within its shard
			name := names[rng.Intn(len(names))]
			ss := st.ShardStates.At(name)
			ss.Shards = append([]models.ShardState(nil), ss.Shards...)
			s := &ss.Shards[rng.Intn(len(ss.Shards))]
			s.Leader = st.Assignments.At(name).Shards[s.ID].Replicas[0]
			st.ShardStates = st.ShardStates.Set(name, ss)
		case op == 4: // dropped, or moved to another cluster
			name := names[rng.Intn(len(names))]
			if rng.Intn(2) == 0 {
				st.Assignments = st.Assignments.Delete(name)
			} else {
				a := st.Assignments.At(name)
				a.Cluster = "other"
				st.Assignments = st.Assignments.Set(name, a)
			}
		case op == 5:
			addNode(6 + rng.Intn(4))
		case op == 6:
			ids := st.Nodes.At("c").Keys()
			if len(ids) > 4 {
				st.Nodes = statemachine.DeleteIn(st.Nodes, "c", ids[rng.Intn(len(ids))])
			}
		case op == 8: // a node's record changes
			ids := st.Nodes.At("c").Keys()
			id := ids[rng.Intn(len(ids))]
			rec := st.Nodes.At("c").At(id)
			rec.Weight, rec.Labels = 1+rng.Intn(3), map[string]string{"zone": fmt.Sprint(rng.Intn(3))}
			st.Nodes = statemachine.SetIn(st.Nodes, "c", id, rec)
		case op == 9: // the cluster's failure domain switched
			sc := st.StorageClusters["c"]
			sc.FailureDomain = map[string]string{"": "zone", "zone": ""}[sc.FailureDomain]
			st.StorageClusters = map[string]models.StorageCluster{"c": sc}
		default:
			ids := st.Nodes.At("c").Keys()
			st.Drains = map[string]models.Drain{ids[rng.Intn(len(ids))]: {}}
		}
		for name, p := range placed { // the state catches up
			if rng.Intn(2) == 0 {
				put(p.db, []ownPlacement{p})
				delete(placed, name)
			}
		}
		view := clusterView(st, "c")
		for name, p := range placed {
			for _, sh := range dbShards(name, p.assign, p.states) {
				view.Shards[sh.key], view.Want[sh.key] = sh.at, p.db.ReplicaFactor
			}
		}
		fresh, cached := loaded(view), pc.sync(st, "c", placed)
		for k := range view.Want {
			require.ElementsMatch(t, fresh.Nodes(k), cached.Nodes(k), "step %d: %s", step, k)
			require.Equal(t, fresh.Leader(k), cached.Leader(k), "step %d: %s", step, k)
		}
		for _, n := range view.Nodes {
			require.Equal(t, fresh.Partitions(n.ID), cached.Partitions(n.ID), "step %d: %s", step, n.ID)
		}
		add := map[placement.ShardKey]int{{DB: "probe", Shard: 0}: 2, {DB: "probe", Shard: 1}: 2, {DB: "probe", Shard: 2}: 2}
		want, err := fresh.PlaceNew(add)
		require.NoError(t, err)
		got, err := cached.PlaceNew(add)
		require.NoError(t, err)
		for k := range add {
			require.Equal(t, want.Target[k], got.Target[k], "step %d", step)
		}
	}
}

// A pass after one node's record changed and another node was marked
// draining reads those nodes, not the cluster's other thousand: the master
// syncs its placement cache on every publication.
func TestPlaceCacheNodeSyncCostFollowsTheChanges(t *testing.T) {
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		Databases: statemachine.MapOf(map[string]models.Database{}), Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}), Drains: map[string]models.Drain{},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c", FailureDomain: "zone"}}}
	for i := range 1000 {
		id := fmt.Sprintf("n%04d", i)
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id, Cluster: "c", Labels: map[string]string{"zone": fmt.Sprint(i % 3)}})
	}
	pc := newPlaceCache()
	pc.sync(st, "c", nil)
	require.Equal(t, 1000, pc.looked)

	rec := st.Nodes.At("c").At("n0007")
	rec.Weight = 2
	st.Nodes = statemachine.SetIn(st.Nodes, "c", "n0007", rec)
	st.Drains = map[string]models.Drain{"n0500": {NodeID: "n0500"}}
	pc.looked = 0
	s := pc.sync(st, "c", nil)
	require.LessOrEqual(t, pc.looked, 16, "nodes read for two changes")
	require.Equal(t, 2, pc.nodes["n0007"].Weight)
	require.True(t, pc.nodes["n0500"].Draining)

	// The placement decided on the cache is the one a fresh read makes.
	add := map[placement.ShardKey]int{{DB: "probe", Shard: 0}: 3, {DB: "probe", Shard: 1}: 3}
	want, err := loaded(clusterView(st, "c")).PlaceNew(add)
	require.NoError(t, err)
	got, err := s.PlaceNew(add)
	require.NoError(t, err)
	require.Equal(t, want.Target, got.Target)
}

// benchPlaceOne measures one placement decision of the master for one new
// database (32 shards x RF 3) on n nodes holding n such databases, placed
// one by one through the same cache: sync with the state, then place.
func benchPlaceOne(b *testing.B, n int) {
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		Databases: statemachine.MapOf(map[string]models.Database{}), Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}), Drains: map[string]models.Drain{},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c"}}}
	for i := range n {
		id := fmt.Sprintf("n%05d", i)
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id, Cluster: "c"})
	}
	pc := newPlaceCache()
	for i := range n {
		db := models.Database{Name: fmt.Sprintf("db%05d", i), StorageCluster: "c", NumShards: 32, ReplicaFactor: 3}
		p, err := placeBatch(pc.sync(st, "c", nil), []growth{{db: db}})
		require.NoError(b, err)
		st.Databases = st.Databases.Set(db.Name, db)
		st.Assignments = st.Assignments.Set(db.Name, p[0].assign)
		st.ShardStates = st.ShardStates.Set(db.Name, p[0].states)
	}
	next := models.Database{Name: "next", StorageCluster: "c", NumShards: 32, ReplicaFactor: 3}
	for b.Loop() {
		_, err := placeBatch(pc.sync(st, "c", nil), []growth{{db: next}})
		require.NoError(b, err)
	}
}

func BenchmarkPlaceOneDatabase100(b *testing.B)  { benchPlaceOne(b, 100) }
func BenchmarkPlaceOneDatabase1000(b *testing.B) { benchPlaceOne(b, 1000) }
