package placement

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSimulateValidation(t *testing.T) {
	tests := []struct {
		p    SimulateParams
		want string
	}{
		{SimulateParams{Nodes: 0, Shards: 1, Replicas: 1}, "nodes 0"},
		{SimulateParams{Nodes: 3, Shards: 0, Replicas: 1}, "shards 0"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 0}, "replicas 0"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 1, AddNodes: -1}, "add-nodes -1"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 1, RemoveNodes: -2}, "remove-nodes -2"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 1, RemoveNodes: 4}, "remove-nodes 4 exceeds nodes 3"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 4}, "replicas 4 exceeds nodes 3"},
		{SimulateParams{Nodes: 3, Shards: 1, Replicas: 3, RemoveNodes: 1}, "replicas 3 exceeds 2 nodes left"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := Simulate(tt.p)
			require.ErrorIs(t, err, ErrInvalidParams)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestSimulate(t *testing.T) {
	for _, p := range []SimulateParams{
		{Nodes: 50, Shards: 2000, Replicas: 3, AddNodes: 1},
		{Nodes: 50, Shards: 2000, Replicas: 3, RemoveNodes: 1},
		{Nodes: 50, Shards: 2000, Replicas: 2, AddNodes: 3, RemoveNodes: 2},
		{Nodes: 3, Shards: 10, Replicas: 3, AddNodes: 1},
	} {
		res, err := Simulate(p)
		require.NoError(t, err)
		require.Equal(t, res.LowerBound, res.Moves, "%+v", p)
		require.LessOrEqual(t, res.ReplicasPerNode.Max-res.ReplicasPerNode.Min, 1)
		require.LessOrEqual(t, res.LeadersPerNode.Max-res.LeadersPerNode.Min, 1)
		require.Positive(t, res.Moves)
	}
	// Adding one node to 50 balanced nodes holding 6000 replicas: the new
	// node takes floor(6000/51) = 117, all of them relocations.
	res, err := Simulate(SimulateParams{Nodes: 50, Shards: 2000, Replicas: 3, AddNodes: 1})
	require.NoError(t, err)
	require.Equal(t, 117, res.Moves)
}
