package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSharders runs every policy over the same table of clusters and checks
// the invariants each promises (see promised): distinct nodes always;
// distinct domains for spread and hash; per-database and total shares of
// replicas and leaders, in proportion to weight, for spread.
func TestSharders(t *testing.T) {
	weighted := []Node{{ID: "big", Weight: 3}, {ID: "m1", Weight: 2}, {ID: "s1"}, {ID: "s2"}}
	tests := []struct {
		name  string
		nodes []Node
		dbs   map[string][2]int // shards, replicas
	}{
		{"one node", []Node{{ID: "a"}}, map[string][2]int{"db": {8, 1}}},
		{"three zones of three", zoned(9, 3), map[string][2]int{"db": {16, 3}, "g": {4, 1}, "x": {4, 2}}},
		{"four zones rf3", zoned(8, 4), map[string][2]int{"db": {10, 3}, "w": {7, 2}}},
		{"two zones rf3 (unmet)", zoned(6, 2), map[string][2]int{"db": {12, 3}}},
		{"no zones", zoned(5, 5), map[string][2]int{"a": {3, 1}, "b": {5, 2}, "c": {7, 3}}},
		{"weights", weighted, map[string][2]int{"db": {21, 1}, "r2": {14, 2}}},
		{"many small databases", zoned(6, 3), func() map[string][2]int {
			m := map[string][2]int{}
			for i := range 12 {
				m[fmt.Sprintf("db%02d", i)] = [2]int{1 + i%3, 1 + i%3}
			}
			return m
		}()},
	}
	for _, tt := range tests {
		for _, policy := range Policies {
			t.Run(tt.name+"/"+policy, func(t *testing.T) {
				c := Cluster{Nodes: tt.nodes, Want: map[ShardKey]int{}}
				for db, sr := range tt.dbs {
					for i := range sr[0] {
						c.Want[ShardKey{db, i}] = sr[1]
					}
				}
				s, err := NewSharder(policy)
				require.NoError(t, err)
				require.Equal(t, policy, s.Policy())
				Load(s, c)
				plan, err := s.Rebalance()
				require.NoError(t, err)
				checkInvariants(t, policy, c, plan)
				checkMoves(t, c, plan)
				checkLookups(t, s, plan)
				again, err := s.Plan()
				require.NoError(t, err)
				require.Zero(t, again.Relocations, "a placed layout stays")
			})
		}
	}
}

// checkLookups: Partitions and Nodes answer what the adopted plan says.
func checkLookups(t *testing.T, s Sharder, plan Plan) {
	t.Helper()
	byNode := map[string][]ShardKey{}
	for _, k := range slices.SortedFunc(func(yield func(ShardKey) bool) {
		for k := range plan.Target {
			if !yield(k) {
				return
			}
		}
	}, compareKeys) {
		sp := plan.Target[k]
		require.ElementsMatch(t, sp.Replicas, s.Nodes(k))
		require.Equal(t, sp.Leader, s.Leader(k))
		for _, id := range sp.Replicas {
			byNode[id] = append(byNode[id], k)
		}
	}
	for id, keys := range byNode {
		require.Equal(t, keys, s.Partitions(id), "partitions of %s", id)
	}
}

func TestSharderRegistration(t *testing.T) {
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			s, err := NewSharder(policy)
			require.NoError(t, err)
			for _, n := range zoned(4, 2) {
				s.RegisterNode(n)
			}
			for i := range 6 {
				s.RegisterPartition(ShardKey{"db", i}, 2, ShardPlacement{})
			}
			_, err = s.Rebalance()
			require.NoError(t, err)
			gone := s.Partitions("n00")
			require.NotEmpty(t, gone)
			s.UnregisterNode("n00")
			bound := s.LowerBound()
			plan, err := s.Rebalance()
			require.NoError(t, err)
			require.Empty(t, s.Partitions("n00"))
			if policy == "hash" {
				require.Equal(t, len(gone), plan.Relocations, "only the lost node's replicas move")
			} else {
				require.GreaterOrEqual(t, plan.Relocations, len(gone))
				require.Equal(t, bound, plan.Relocations)
			}
			for i := range 6 {
				require.Len(t, s.Nodes(ShardKey{"db", i}), 2)
			}
			s.UnregisterPartition(ShardKey{"db", 5})
			plan, err = s.Rebalance()
			require.NoError(t, err)
			require.Nil(t, s.Nodes(ShardKey{"db", 5}))
			removes := 0
			for _, m := range plan.Moves {
				if m.Shard == (ShardKey{"db", 5}) {
					require.Equal(t, MoveRemove, m.Kind)
					removes++
				}
			}
			require.Equal(t, 2, removes, "a dropped partition's replicas are removed")
			s.RegisterPartition(ShardKey{"db", 9}, 9, ShardPlacement{})
			_, err = s.Rebalance()
			require.ErrorIs(t, err, ErrNotEnoughNodes)
		})
	}
	_, err := NewSharder("nope")
	require.ErrorIs(t, err, ErrInvalidParams)
}
