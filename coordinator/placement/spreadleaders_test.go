package placement

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The leader index keeps each node's shards in the order of the databases
// and their shards (the order a hand-over chain tries them in) as
// leaderships move.
func TestLeaderIndexKeepsOrderAsLeadersMove(t *testing.T) {
	a := &spreadDB{name: "a", shards: []sshard{{leader: 0}, {leader: 1}, {leader: 0}}}
	b := &spreadDB{name: "b", shards: []sshard{{leader: 2}, {leader: -1}}}
	led := indexLeaders([]*spreadDB{a, b})
	order := func(v int32) []int {
		var out []int
		for _, r := range led[v] {
			out = append(out, r.pos)
		}
		return out
	}
	require.Equal(t, []int{0, 2}, order(0))

	led.move(led[2][0], 2, 0) // b/0 to node 0: after a's shards
	require.Equal(t, []int{0, 2, 3}, order(0))
	led.move(led[0][1], 0, 1) // a/2 to node 1: after a/1
	require.Equal(t, []int{0, 3}, order(0))
	require.Equal(t, []int{1, 2}, order(1))
	led.move(led[1][1], 1, 0) // a/2 back to node 0: between a/0 and b/0
	require.Equal(t, []int{0, 2, 3}, order(0))
}
