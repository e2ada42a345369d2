package app

import (
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func sourceNames(a *App) []string {
	var names []string
	for _, s := range a.sm.Sources() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// A storage-only node watches its cluster's assignments, shard states and
// live nodes (with the database and storage configs and the master key),
// never the in-sync sets nor the brokers; it still registers, becomes ready,
// and hosts and follows shards. The master and broker process watches
// everything.
func TestStorageNodeWatchesOnlyWhatItHosts(t *testing.T) {
	c := startTestCluster(t, nil)
	require.Eventually(t, func() bool {
		return slices.Equal([]string{statemachine.SourceAssign, statemachine.SourceDatabaseConfig, statemachine.SourceMaster,
			statemachine.ClusterNodesSource("default"), statemachine.SourceShardState, statemachine.SourceStorageConfig}, sourceNames(c.peer))
	}, 10*time.Second, 20*time.Millisecond, "the storage-only node's sources: %v", sourceNames(c.peer))
	require.Contains(t, sourceNames(c.core), statemachine.ClusterNodesSource("default"))
	require.Contains(t, sourceNames(c.core), statemachine.ClusterISRSource("default"))
	require.Contains(t, sourceNames(c.core), statemachine.SourceBrokers)
	require.Eventually(t, func() bool { return c.getJSON(c.peer, "/api/v1/ready", &map[string]any{}) == 200 },
		10*time.Second, 20*time.Millisecond, "the storage-only node becomes ready (it registers)")

	// Both nodes host a replica of each shard: the peer follows the
	// shards the core leads and leads the others, and every in-sync set
	// holds both (the followers found their leaders' addresses).
	c.createDB("w", 4, 2)
	require.Eventually(t, func() bool {
		st := c.core.State()
		n := 0
		for _, set := range st.ISR.At("default").All() {
			if len(set.Replicas) == 2 {
				n++
			}
		}
		return n == 4 && c.peer.host.Hosted() == 4
	}, 30*time.Second, 20*time.Millisecond)
	st := c.peer.State()
	require.Equal(t, 2, st.Nodes.At("default").Len(), "a storage-only node sees its cluster's live nodes")
	require.Zero(t, st.ISR.Len(), "but no in-sync sets")
	require.Len(t, st.Assignments.At("w").Shards, 4)
	c.write("w", "cpu,host=a v=1 1700000000000000000\ncpu,host=b v=2 1700000000000000000\n")
}
