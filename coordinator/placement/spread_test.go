package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func zoned(n, zones int) []Node {
	var out []Node
	for i := range n {
		out = append(out, Node{ID: fmt.Sprintf("n%02d", i), Domain: fmt.Sprintf("z%d", i%zones)})
	}
	return out
}

func TestSpreadSmoke(t *testing.T) {
	c := Cluster{Nodes: zoned(9, 3), Want: map[ShardKey]int{}}
	for i := range 16 {
		c.Want[ShardKey{"db", i}] = 3
	}
	for i := range 5 {
		c.Want[ShardKey{"small", i}] = 1
	}
	plan, err := PlaceSpread(c)
	require.NoError(t, err)
	checkInvariants(t, "spread", c, plan)
}

// TestSpreadSecondNodeSplitsEachDatabase is issue 24's example: G (RF 1, 4
// shards), X (RF 1, 4 shards) and web (RF 2, 4 shards) on one node; a second
// node joins. Balancing the total only moved all of G; per database, G and X
// are each split 2/2, so losing either node keeps half of each online.
func TestSpreadSecondNodeSplitsEachDatabase(t *testing.T) {
	c := Cluster{Nodes: []Node{{ID: "n1"}}, Want: map[ShardKey]int{}}
	for i := range 4 {
		c.Want[ShardKey{"G", i}] = 1
		c.Want[ShardKey{"X", i}] = 1
		c.Want[ShardKey{"web", i}] = 1 // RF 2 needs the second node
	}
	c = next(c, mustSpread(t, c))
	c.Nodes = append(c.Nodes, Node{ID: "n2"})
	for i := range 4 {
		c.Want[ShardKey{"web", i}] = 2
	}
	plan := mustSpread(t, c)
	for _, db := range []string{"G", "X"} {
		per := map[string]int{}
		leads := map[string]int{}
		for i := range 4 {
			sp := plan.Target[ShardKey{db, i}]
			per[sp.Replicas[0]]++
			leads[sp.Leader]++
		}
		require.Equal(t, map[string]int{"n1": 2, "n2": 2}, per, "db %s", db)
		require.Equal(t, map[string]int{"n1": 2, "n2": 2}, leads, "db %s leaders", db)
	}
	webLeads := map[string]int{}
	for i := range 4 {
		webLeads[plan.Target[ShardKey{"web", i}].Leader]++
	}
	require.Equal(t, map[string]int{"n1": 2, "n2": 2}, webLeads)
	require.Equal(t, 4, plan.Relocations, "2 of G and 2 of X move; web only gains replicas")
	require.Equal(t, SpreadLowerBound(c), plan.Relocations)

	// The minmove policy balances the total only: nothing forces G apart.
	mm, err := Place(c)
	require.NoError(t, err)
	checkInvariants(t, "minmove", c, mm)
}

// TestSpreadWeights: replicas follow the weights, each node within one of
// its share, per database and in total.
func TestSpreadWeights(t *testing.T) {
	c := Cluster{Nodes: []Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 3}, {ID: "d", Weight: 4}}, Want: map[ShardKey]int{}}
	for i := range 10 {
		c.Want[ShardKey{"one", i}] = 1 // shares 1, 2, 3, 4: exact
		c.Want[ShardKey{"two", i}] = 2 // shares 2, 4, 6, 8: exact
	}
	for i := range 7 {
		c.Want[ShardKey{"odd", i}] = 1 // shares 0.7, 1.4, 2.1, 2.8
	}
	plan := mustSpread(t, c)
	count := func(db string) map[string]int {
		m := map[string]int{}
		for k, sp := range plan.Target {
			if k.DB == db {
				for _, id := range sp.Replicas {
					m[id]++
				}
			}
		}
		return m
	}
	require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, count("one"))
	require.Equal(t, map[string]int{"a": 2, "b": 4, "c": 6, "d": 8}, count("two"))
	odd := count("odd")
	for id, share := range map[string]float64{"a": 0.7, "b": 1.4, "c": 2.1, "d": 2.8} {
		require.InDelta(t, share, float64(odd[id]), 1-eps, "node %s of odd: %v", id, odd)
	}
}

// TestSpreadZoneLoss: three zones of three nodes, RF 3: every shard has one
// replica per zone; when zone a is gone (two zones left), every shard keeps
// its two replicas in b and c and only a's replicas move, spread over b and
// c (where they break the domain rule unavoidably: DomainsShort says so).
func TestSpreadZoneLoss(t *testing.T) {
	c := Cluster{Nodes: zoned(9, 3), Want: map[ShardKey]int{}}
	for i := range 16 {
		c.Want[ShardKey{"db", i}] = 3
	}
	plan := mustSpread(t, c)
	require.Equal(t, MinMax{3, 3}, DomainsPerShard(c.Nodes, plan.Target))
	require.Empty(t, DomainsShort(c.Nodes, plan.Target))
	c = next(c, plan)
	c.Nodes = slices.DeleteFunc(c.Nodes, func(n Node) bool { return n.Domain == "z0" })
	plan = mustSpread(t, c)
	require.Equal(t, 16, plan.Relocations, "only zone z0's replicas move")
	require.Equal(t, SpreadLowerBound(c), plan.Relocations)
	require.Len(t, DomainsShort(c.Nodes, plan.Target), 16)
}

// TestSpreadPlaceNewOneByOne: databases created one after the other are
// placed without moving the earlier ones, and still end per database and in
// total within one per node, replicas and leaders, on zoned nodes.
func TestSpreadPlaceNewOneByOne(t *testing.T) {
	for _, tc := range []struct{ nodes, zones, dbs, shards, rf int }{
		{10, 10, 10, 4, 3}, {9, 3, 12, 16, 3}, {7, 7, 20, 3, 2}, {6, 3, 9, 5, 1},
	} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			c := Cluster{Nodes: zoned(tc.nodes, tc.zones), Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
			for i := range tc.dbs {
				add := map[ShardKey]int{}
				for s := range tc.shards {
					add[ShardKey{fmt.Sprintf("db%02d", i), s}] = tc.rf
				}
				plan, err := PlaceSpreadNew(c, add)
				require.NoError(t, err)
				for k, sp := range c.Shards {
					require.Equal(t, sp, plan.Target[k], "placing a new database moved %s", k)
				}
				for k := range add {
					c.Want[k] = tc.rf
				}
				c.Shards = plan.Target
			}
			final, err := PlaceSpread(c)
			require.NoError(t, err)
			checkInvariants(t, "spread", c, Plan{Target: c.Shards})
			require.Zero(t, final.Relocations, "the layout built one by one is already balanced")
			_, err = PlaceSpreadNew(c, map[ShardKey]int{{"db00", 0}: tc.rf})
			require.ErrorIs(t, err, ErrShardExists)
		})
	}
}
