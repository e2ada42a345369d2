package placement

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchAddNode measures the re-plan after one empty node joins a balanced
// cluster of n nodes holding p shards x r replicas.
func benchAddNode(b *testing.B, n, p, r int) {
	c := cluster(nil, "db", p, r)
	for i := range n {
		c.Nodes = append(c.Nodes, Node{ID: fmt.Sprintf("node-%06d", i)})
	}
	first, err := Place(c)
	require.NoError(b, err)
	c = next(c, first)
	c.Nodes = append(c.Nodes, Node{ID: fmt.Sprintf("node-%06d", n)})
	for b.Loop() {
		plan, err := Place(c)
		require.NoError(b, err)
		require.Equal(b, p*r/(n+1), plan.Relocations)
	}
}

func BenchmarkPlaceAddNode1000x100000x3(b *testing.B) { benchAddNode(b, 1000, 100000, 3) }

func BenchmarkPlaceAddNode10x1000x3(b *testing.B) { benchAddNode(b, 10, 1000, 3) }
