package placement

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// placeBatchLooked places a batch of batch new databases (32 shards x RF 3)
// through the spread sharder's PlaceNew, as the master does, on n nodes in
// 3 zones already holding 100 such databases, each shard led by its
// smallest replica id (the totals uneven, as while a cluster fills up). It
// returns what the leader leveling's searches looked at per new database.
func placeBatchLooked(t *testing.T, n, batch int) int {
	c := unevenCluster(t, n, 100)
	looked := 0
	s := NewSpread().(*table)
	s.placeSub = func(sub Cluster, others counts, add map[ShardKey]int) (Plan, error) {
		ext, err := extend(sub, add)
		require.NoError(t, err)
		sp, err := planSpread(ext, others)
		require.NoError(t, err)
		looked += sp.looked
		return planFor(ext, sp.target()), nil
	}
	Load(s, c)
	add := map[ShardKey]int{}
	for d := range batch {
		for sh := range 32 {
			add[ShardKey{fmt.Sprintf("new%03d", d), sh}] = 3
		}
	}
	_, err := s.PlaceNew(add)
	require.NoError(t, err)
	return looked / batch
}

// Leveling the leaders of a batch of new databases costs the batch's
// shards, not the cluster's nodes: every chain is searched for from all
// its possible starts at once, and a node no chain reaches costs nothing
// more. It used to search from every node in turn (and, for a node below
// its floor, from every leading node), mostly in vain on a large cluster
// whose totals are uneven: 87 times the work per database at 1,000
// nodes as at 100.
func TestSpreadLevelCostFollowsTheBatchNotTheCluster(t *testing.T) {
	small := placeBatchLooked(t, 100, 64)
	large := placeBatchLooked(t, 1000, 64)
	t.Logf("leveling the leaders of a batch of 64 databases: %d nodes and shards looked at per database with 100 nodes, %d with 1,000", small, large)
	require.LessOrEqual(t, large, 2*small+32*3*10)
}
