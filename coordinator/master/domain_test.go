package master

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestPlacementAcrossFailureDomains: a storage cluster with failure_domain
// "zone" places each shard's replicas in distinct zones, read from the
// nodes' labels, and each database's replicas evenly over the nodes.
func TestPlacementAcrossFailureDomains(t *testing.T) {
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		Databases: statemachine.MapOf(map[string]models.Database{}), Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}), ISR: statemachine.NestedMapOf(map[string]map[string]models.ISR{}), Drains: map[string]models.Drain{},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c", FailureDomain: "zone"}}}
	zone := map[string]string{}
	for i := range 9 {
		id := fmt.Sprintf("n%d", i)
		zone[id] = string(rune('a' + i%3))
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id, Cluster: "c",
			Labels: map[string]string{"zone": zone[id], "rack": fmt.Sprintf("r%d", i)}})
	}
	db := models.Database{Name: "db", StorageCluster: "c", NumShards: 16, ReplicaFactor: 3}
	p, err := placeBatch(loaded(clusterView(st, "c")), []growth{{db: db}})
	require.NoError(t, err)
	as, ss := p[0].assign.Shards, p[0].states.Shards
	perNode := map[string]int{}
	for i, sh := range as {
		zones := map[string]bool{}
		for _, n := range sh.Replicas {
			zones[zone[n]] = true
			perNode[n]++
		}
		require.Len(t, zones, 3, "shard %d on %v", sh.ID, sh.Replicas)
		require.Contains(t, sh.Replicas, ss[i].Leader)
	}
	for n, c := range perNode {
		require.InDelta(t, 48.0/9, c, 1, "node %s", n)
	}

	// The same nodes under a cluster without a failure domain: nothing
	// keeps a shard's replicas out of one zone.
	st.StorageClusters["c"] = models.StorageCluster{Name: "c"}
	require.Empty(t, clusterView(st, "c").Nodes[0].Domain)
}
