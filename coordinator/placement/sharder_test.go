package placement

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkSharder asserts NodesFor and PartitionsFor agree and replicas of a
// partition sit on distinct registered nodes.
func checkSharder(t *testing.T, s Sharder, nodes []string, parts map[ShardKey]int) map[string]int {
	t.Helper()
	load := map[string]int{}
	for p, r := range parts {
		got := s.NodesFor(p)
		require.Len(t, got, min(r, len(nodes)), "partition %s", p)
		seen := map[string]bool{}
		for _, id := range got {
			require.Contains(t, nodes, id)
			require.False(t, seen[id], "partition %s twice on %s", p, id)
			seen[id] = true
			require.Contains(t, s.PartitionsFor(id), p)
			load[id]++
		}
	}
	for _, id := range nodes {
		require.Len(t, s.PartitionsFor(id), load[id], "node %s", id)
	}
	return load
}

func TestSharders(t *testing.T) {
	for name, mk := range map[string]func() Sharder{"lookup": NewLookupSharder, "hash": NewHashSharder} {
		t.Run(name, func(t *testing.T) {
			s := mk()
			require.Empty(t, s.NodesFor(ShardKey{"db", 0}), "unknown partition")
			nodes := []string{"a", "b", "c", "d"}
			for _, id := range nodes {
				s.RegisterNode(id)
			}
			parts := map[ShardKey]int{}
			for i := range 20 {
				parts[ShardKey{"db", i}] = 3
				s.RegisterPartition(ShardKey{"db", i}, 3)
			}
			checkSharder(t, s, nodes, parts)

			before := map[ShardKey][]string{}
			for p := range parts {
				before[p] = s.NodesFor(p)
			}
			s.RegisterNode("e")
			nodes = append(nodes, "e")
			checkSharder(t, s, nodes, parts)
			// Both keep most replicas in place: only moves onto e happen.
			for p := range parts {
				for _, id := range s.NodesFor(p) {
					if id != "e" {
						require.Contains(t, before[p], id, "%s moved between old nodes", p)
					}
				}
			}

			s.UnregisterNode("a")
			nodes = nodes[1:]
			checkSharder(t, s, nodes, parts)
			require.Empty(t, s.PartitionsFor("a"))

			s.UnregisterPartition(ShardKey{"db", 0})
			delete(parts, ShardKey{"db", 0})
			require.Empty(t, s.NodesFor(ShardKey{"db", 0}))
			checkSharder(t, s, nodes, parts)
		})
	}
}

func TestLookupSharderBalanced(t *testing.T) {
	s := NewLookupSharder()
	var nodes []string
	parts := map[ShardKey]int{}
	for i := range 7 {
		nodes = append(nodes, fmt.Sprintf("n%d", i))
		s.RegisterNode(nodes[i])
	}
	for i := range 30 {
		parts[ShardKey{"db", i}] = 2
		s.RegisterPartition(ShardKey{"db", i}, 2)
	}
	load := checkSharder(t, s, nodes, parts)
	spread := minMax(load)
	require.LessOrEqual(t, spread.Max-spread.Min, 1, "load %v", load)
}

func TestLookupSharderMoreReplicasThanNodes(t *testing.T) {
	s := NewLookupSharder()
	s.RegisterPartition(ShardKey{"db", 0}, 3)
	require.Empty(t, s.NodesFor(ShardKey{"db", 0}), "no nodes, nothing served")
	s.RegisterNode("a")
	require.Equal(t, []string{"a"}, s.NodesFor(ShardKey{"db", 0}))
	s.RegisterNode("b")
	s.RegisterNode("c")
	require.Equal(t, []string{"a", "b", "c"}, s.NodesFor(ShardKey{"db", 0}), "full factor once nodes exist")
}

func TestHashSharderStateless(t *testing.T) {
	a, b := NewHashSharder(), NewHashSharder()
	for _, id := range []string{"x", "y", "z", "w"} {
		a.RegisterNode(id)
	}
	for _, id := range []string{"w", "z", "y", "x"} {
		b.RegisterNode(id)
	}
	for i := range 10 {
		p := ShardKey{"db", i}
		a.RegisterPartition(p, 2)
		b.RegisterPartition(p, 2)
		require.Equal(t, a.NodesFor(p), b.NodesFor(p), "same nodes, same answer, any order")
	}
}
