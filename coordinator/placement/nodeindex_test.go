package placement

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The spread sharder indexes its nodes once per change of them, not once
// per decision (sorting and indexing every node was most of placing one
// database at 1,000 nodes), and a decision on the kept index is the one a
// fresh read of the cluster makes, also right after a node changed, came
// or went.
func TestSpreadSharderIndexesNodesOncePerChange(t *testing.T) {
	c := unevenCluster(t, 30, 10)
	s := NewSpread().(*table)
	Load(s, c)
	add := func(name string) map[ShardKey]int {
		a := map[ShardKey]int{}
		for sh := range 32 {
			a[ShardKey{name, sh}] = 3
		}
		return a
	}
	// Every decision of s against a from-scratch plan of the same cluster.
	same := func(a map[ShardKey]int) {
		t.Helper()
		// A copy of the nodes: a fresh read builds its own index.
		fresh := Cluster{Nodes: append([]Node(nil), c.Nodes...), Shards: c.Shards, Want: c.Want}
		want, err := PlaceSpreadNew(fresh, a)
		require.NoError(t, err)
		got, err := s.PlaceNew(a)
		require.NoError(t, err)
		for k := range a {
			require.Equal(t, want.Target[k], got.Target[k], "shard %s", k)
		}
	}
	same(add("a"))
	index := s.index
	require.NotNil(t, index)
	same(add("b"))
	require.Same(t, index, s.index, "no node changed: the same index")

	// The same record again changes nothing.
	s.RegisterNode(c.Nodes[3])
	same(add("c"))
	require.Same(t, index, s.index)

	// A heavier node, a draining one, one gone and one new: each is seen by
	// the next decision.
	c.Nodes[3].Weight = 4
	s.RegisterNode(c.Nodes[3])
	same(add("d"))
	require.NotSame(t, index, s.index)
	index = s.index

	c.Nodes[5].Draining = true
	s.RegisterNode(c.Nodes[5])
	same(add("e"))
	require.NotSame(t, index, s.index)
	got, err := s.PlaceNew(add("f"))
	require.NoError(t, err)
	for k := range add("f") {
		require.NotContains(t, got.Target[k].Replicas, c.Nodes[5].ID, "a draining node takes no new replica")
	}
	index = s.index

	gone := c.Nodes[7].ID
	s.UnregisterNode(gone)
	c.Nodes = append(c.Nodes[:7:7], c.Nodes[8:]...)
	s.RegisterNode(Node{ID: "new", Domain: "z1"})
	c.Nodes = append(c.Nodes, Node{ID: "new", Domain: "z1"})
	same(add("g"))
	require.NotSame(t, index, s.index)
	got, err = s.PlaceNew(add("h"))
	require.NoError(t, err)
	on := map[string]int{}
	for k := range add("h") {
		for _, id := range got.Target[k].Replicas {
			on[id]++
		}
	}
	require.Zero(t, on[gone], "a node gone takes no replica")
	require.Positive(t, on["new"], "the new node takes replicas")
	t.Logf("replicas of h on the new node: %d", on["new"])
}
