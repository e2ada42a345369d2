package placement

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var abc = []string{"a", "b", "c"}

func TestPlaceTable(t *testing.T) {
	balanced := mustPlace(t, cluster(abc, "db", 6, 2)) // 12 replicas, 4 per node

	tests := []struct {
		name        string
		cluster     func(t *testing.T) Cluster
		relocations int
		check       func(t *testing.T, c Cluster, plan Plan)
	}{
		{
			name:    "new cluster",
			cluster: func(t *testing.T) Cluster { return cluster(abc, "db", 4, 2) },
			check: func(t *testing.T, _ Cluster, plan Plan) {
				adds := 0
				for _, m := range plan.Moves {
					if m.Kind == MoveAdd {
						adds++
					}
				}
				require.Equal(t, 8, adds)
			},
		},
		{
			name: "add node",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				c.Nodes = append(c.Nodes, Node{ID: "d"})
				return c
			},
			relocations: 3, // 12 replicas over 4 nodes: d takes 3
			check: func(t *testing.T, _ Cluster, plan Plan) {
				for _, m := range plan.Moves {
					if m.Kind == MoveAdd {
						require.Equal(t, "d", m.To, "only the new node receives replicas")
					}
				}
			},
		},
		{
			name: "remove node",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				c.Nodes = []Node{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}
				c = next(c, mustPlace(t, c))
				c.Nodes = []Node{{ID: "a"}, {ID: "b"}, {ID: "d"}} // c disappears
				return c
			},
			relocations: 3, // c held 3 of 12
			check: func(t *testing.T, c Cluster, plan Plan) {
				for k, sp := range c.Shards {
					for _, id := range sp.Replicas {
						if id != "c" {
							require.Contains(t, plan.Target[k].Replicas, id, "replica %s of %s stays", id, k)
						}
					}
				}
			},
		},
		{
			name: "drain node",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				c.Nodes = append(c.Nodes, Node{ID: "d"})
				c = next(c, mustPlace(t, c))
				c.Nodes[0].Draining = true
				return c
			},
			relocations: 3,
			check: func(t *testing.T, _ Cluster, plan Plan) {
				for k, sp := range plan.Target {
					require.NotContains(t, sp.Replicas, "a", "draining node still holds %s", k)
				}
			},
		},
		{
			name: "replica factor up",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				for k := range c.Want {
					c.Want[k] = 3
				}
				return c
			},
			relocations: 0,
		},
		{
			name: "replica factor down",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				for k := range c.Want {
					c.Want[k] = 1
				}
				return c
			},
			relocations: 0,
			check: func(t *testing.T, c Cluster, plan Plan) {
				for k, sp := range plan.Target {
					require.Subset(t, c.Shards[k].Replicas, sp.Replicas, "lower factor only removes")
				}
			},
		},
		{
			name: "multiple databases balance together",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				c.Want[ShardKey{"other", 0}] = 1
				c.Want[ShardKey{"other", 1}] = 1
				c.Want[ShardKey{"third", 0}] = 3
				return c
			},
			relocations: 0,
		},
		{
			name: "current leaders kept",
			cluster: func(t *testing.T) Cluster {
				return next(cluster(abc, "db", 6, 2), balanced)
			},
			check: func(t *testing.T, _ Cluster, plan Plan) {
				require.Empty(t, plan.Moves, "a balanced cluster needs no moves")
			},
		},
		{
			name: "dropped shard is removed",
			cluster: func(t *testing.T) Cluster {
				c := next(cluster(abc, "db", 6, 2), balanced)
				delete(c.Want, ShardKey{"db", 5})
				return c
			},
			check: func(t *testing.T, c Cluster, plan Plan) {
				removes := 0
				for _, m := range plan.Moves {
					if m.Kind == MoveRemove && m.Shard == (ShardKey{"db", 5}) {
						removes++
					}
				}
				require.Equal(t, 2, removes)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cluster(t)
			plan := mustPlace(t, c)
			require.Equal(t, tt.relocations, plan.Relocations)
			if tt.check != nil {
				tt.check(t, c, plan)
			}
		})
	}
}

func TestPlaceKeepsLeaderWhenBalanceAllows(t *testing.T) {
	c := cluster(abc, "db", 3, 3)
	c.Shards = map[ShardKey]ShardPlacement{
		{"db", 0}: {Replicas: abc, Leader: "c"},
		{"db", 1}: {Replicas: abc, Leader: "a"},
		{"db", 2}: {Replicas: abc, Leader: "a"}, // a would lead two
	}
	plan := mustPlace(t, c)
	require.Equal(t, "c", plan.Target[ShardKey{"db", 0}].Leader)
	require.Equal(t, "a", plan.Target[ShardKey{"db", 1}].Leader)
	require.Equal(t, "b", plan.Target[ShardKey{"db", 2}].Leader)
	require.Equal(t, []Move{{Kind: MoveLeader, Shard: ShardKey{"db", 2}, From: "a", To: "b"}}, plan.Moves)
}

func TestPlaceLeaderOffDrainingNode(t *testing.T) {
	c := cluster(abc, "db", 1, 2)
	c.Shards = map[ShardKey]ShardPlacement{{"db", 0}: {Replicas: []string{"a", "b"}, Leader: "a"}}
	c.Nodes[0].Draining = true
	plan := mustPlace(t, c)
	require.NotEqual(t, "a", plan.Target[ShardKey{"db", 0}].Leader)
	// The add comes before the leader change, which comes before the remove.
	kinds := []MoveKind{}
	for _, m := range plan.Moves {
		kinds = append(kinds, m.Kind)
	}
	require.Equal(t, []MoveKind{MoveAdd, MoveLeader, MoveRemove}, kinds)
}

func TestPlaceErrors(t *testing.T) {
	_, err := Place(cluster([]string{"a", "b"}, "db", 1, 3))
	require.ErrorIs(t, err, ErrNotEnoughNodes)
	require.Contains(t, err.Error(), "replica factor 3 exceeds 2 available nodes")

	c := cluster(abc, "db", 1, 3)
	c.Nodes[2].Draining = true
	_, err = Place(c)
	require.ErrorIs(t, err, ErrNotEnoughNodes, "draining nodes do not count")

	_, err = Place(cluster(abc, "db", 1, 0))
	require.ErrorIs(t, err, ErrInvalidReplicaFactor)
	require.False(t, errors.Is(err, ErrNotEnoughNodes))

	require.Zero(t, LowerBound(cluster(nil, "db", 1, 1)), "no bound for an impossible cluster")
}

func TestPlaceEmpty(t *testing.T) {
	plan := mustPlace(t, cluster(abc, "db", 0, 1))
	require.Empty(t, plan.Target)
	require.Empty(t, plan.Moves)
}

func TestPlaceNew(t *testing.T) {
	c := next(cluster(abc, "db", 4, 2), mustPlace(t, cluster(abc, "db", 4, 2)))
	add := map[ShardKey]int{{"new", 0}: 2, {"new", 1}: 2}
	plan, err := PlaceNew(c, add)
	require.NoError(t, err)
	ext := next(c, Plan{Target: c.Shards})
	for k, r := range add {
		ext.Want[k] = r
	}
	checkPlan(t, ext, plan)
	require.Zero(t, plan.Relocations, "existing replicas stay put")

	_, err = PlaceNew(c, map[ShardKey]int{{"db", 0}: 2})
	require.ErrorIs(t, err, ErrShardExists)
}
