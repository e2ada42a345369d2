package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchPlaceNewDB measures placing one more database (32 shards x RF 3) by
// the spread sharder on n nodes in 3 zones already holding n such databases
// (registered once, as the master keeps them).
func benchPlaceNewDB(b *testing.B, n int) { benchPlaceNewDBLed(b, n, false) }

// benchPlaceNewDBLed is benchPlaceNewDB where, with uneven, every placed
// shard is led by its smallest replica id: the nodes' leadership totals
// are far from even (as while a cluster is being filled, before the
// rebalance), so the total's leveling runs for most nodes.
func benchPlaceNewDBLed(b *testing.B, n int, uneven bool) {
	c := Cluster{Nodes: zoned(n, 3), Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
	add := map[ShardKey]int{}
	for d := range n {
		for s := range 32 {
			add[ShardKey{fmt.Sprintf("db%05d", d), s}] = 3
		}
	}
	plan, err := PlaceSpreadNew(c, add)
	require.NoError(b, err)
	c.Shards = plan.Target
	if uneven {
		for k, p := range c.Shards {
			p.Leader = slices.Min(p.Replicas)
			c.Shards[k] = p
		}
	}
	for k, r := range add {
		c.Want[k] = r
	}
	one := map[ShardKey]int{}
	for s := range 32 {
		one[ShardKey{"new", s}] = 3
	}
	s := NewSpread()
	Load(s, c)
	for b.Loop() {
		_, err := s.PlaceNew(one)
		require.NoError(b, err)
	}
}

func BenchmarkSpreadPlaceNewDB100(b *testing.B)  { benchPlaceNewDB(b, 100) }
func BenchmarkSpreadPlaceNewDB1000(b *testing.B) { benchPlaceNewDB(b, 1000) }

func BenchmarkSpreadPlaceNewDBUneven100(b *testing.B)  { benchPlaceNewDBLed(b, 100, true) }
func BenchmarkSpreadPlaceNewDBUneven1000(b *testing.B) { benchPlaceNewDBLed(b, 1000, true) }

// benchRebalanceUneven measures the spread sharder's whole plan (a
// rebalance) of n nodes in 3 zones holding n databases of 32 shards x RF 3
// whose every shard is led by its smallest replica id, so the leveling of
// the total moves leaderships off most nodes (as after the nodes' leases
// came back from a storm).
func benchRebalanceUneven(b *testing.B, n int) {
	c := unevenCluster(b, n, n)
	for b.Loop() {
		_, err := PlaceSpread(c)
		require.NoError(b, err)
	}
}

func BenchmarkSpreadRebalanceUneven300(b *testing.B)  { benchRebalanceUneven(b, 300) }
func BenchmarkSpreadRebalanceUneven1000(b *testing.B) { benchRebalanceUneven(b, 1000) }

// unevenCluster is n nodes in 3 zones holding dbs databases of 32 shards x
// RF 3, placed by the spread sharder, whose every shard is led by its
// smallest replica id: the totals of leaderships uneven, as after the
// nodes' leases came back from a storm or while a cluster fills up.
func unevenCluster(tb testing.TB, n, dbs int) Cluster {
	c := Cluster{Nodes: zoned(n, 3), Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
	for d := range dbs {
		for s := range 32 {
			c.Want[ShardKey{fmt.Sprintf("db%05d", d), s}] = 3
		}
	}
	plan, err := PlaceSpreadNew(c, c.Want)
	require.NoError(tb, err)
	c.Shards = plan.Target
	for k, p := range c.Shards {
		p.Leader = slices.Min(p.Replicas)
		c.Shards[k] = p
	}
	return c
}
