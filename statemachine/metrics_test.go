package statemachine

import (
	"strings"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func healthState() *State {
	st := emptyState()
	st.Master = &models.MasterRecord{NodeID: "m", Term: 7}
	st.StorageClusters["c"] = models.StorageCluster{Name: "c"}
	st.Nodes = st.Nodes.Set("c", MapOf(map[string]models.StorageNode{"a": {NodeID: "a"}, "b": {NodeID: "b"}}))
	st.Databases = st.Databases.Set("d", models.Database{Name: "d", StorageCluster: "c", NumShards: 6, ReplicaFactor: 2})
	st.Assignments = st.Assignments.Set("d", models.Assignment{DB: "d", Cluster: "c", Shards: []models.ShardAssignment{
		{ID: 0, Replicas: []string{"a", "b"}}, // healthy, no in-sync set published: all replicas count
		{ID: 1, Replicas: []string{"a", "b"}}, // in-sync set shrank to the leader
		{ID: 2, Replicas: []string{"a", "x"}}, // in-sync set names a dead node
		{ID: 3, Replicas: []string{"x", "b"}}, // published offline
		{ID: 4, Replicas: []string{"x", "a"}}, // leader dead, master has not reacted yet
		// shard 5 not placed yet
	}})
	st.ShardStates = st.ShardStates.Set("d", models.ShardStates{DB: "d", Shards: []models.ShardState{
		{ID: 0, Leader: "a", Term: 1, Status: models.StatusOnline},
		{ID: 1, Leader: "b", Term: 1, Status: models.StatusOnline},
		{ID: 2, Leader: "a", Term: 1, Status: models.StatusOnline},
		{ID: 3, Leader: "x", Term: 2, Status: models.StatusOffline},
		{ID: 4, Leader: "x", Term: 1, Status: models.StatusOnline},
	}})
	st.ISR = st.ISR.Set("c", MapOf(map[string]models.ISR{
		"d/1": {Leader: "b", Term: 1, Replicas: []string{"b"}},
		"d/2": {Leader: "a", Term: 1, Replicas: []string{"a", "x"}},
	}))
	return st
}

func TestShardHealth(t *testing.T) {
	st := healthState()
	require.Equal(t, Health{Offline: 3, UnderReplicated: 2}, ShardHealth(st, st.Databases.At("d")))
}

func TestClusterCollector(t *testing.T) {
	st := healthState()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewClusterCollector(func() *State { return st }))
	want := `
# HELP cairn_cluster_shards_offline Shards of each database without a live leader (offline or not placed yet): their writes fail.
# TYPE cairn_cluster_shards_offline gauge
cairn_cluster_shards_offline{database="d"} 3
# HELP cairn_cluster_shards_under_replicated Online shards of each database with fewer live in-sync replicas than the replica factor.
# TYPE cairn_cluster_shards_under_replicated gauge
cairn_cluster_shards_under_replicated{database="d"} 2
# HELP cairn_cluster_storage_nodes Live storage nodes of each storage cluster.
# TYPE cairn_cluster_storage_nodes gauge
cairn_cluster_storage_nodes{cluster="c"} 2
# HELP cairn_cluster_master_elected 1 while the state names an elected master, else 0.
# TYPE cairn_cluster_master_elected gauge
cairn_cluster_master_elected 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"cairn_cluster_shards_offline", "cairn_cluster_shards_under_replicated", "cairn_cluster_storage_nodes", "cairn_cluster_master_elected"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
