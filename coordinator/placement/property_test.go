package placement

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlaceProperties drives random clusters through random sequences of
// node additions, removals, drains, undrains, replica factor changes and
// database creation/deletion, checking every invariant after each re-plan.
func TestPlaceProperties(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			nextID := 0
			newNode := func() Node {
				nextID++
				return Node{ID: fmt.Sprintf("n%02d", nextID)}
			}
			c := Cluster{Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
			for range 1 + rng.Intn(7) {
				c.Nodes = append(c.Nodes, newNode())
			}
			dbs := 0
			addDB := func() {
				live := countLive(c.Nodes)
				if live == 0 {
					return
				}
				dbs++
				r := 1 + rng.Intn(min(live, 3))
				for i := range 1 + rng.Intn(12) {
					c.Want[ShardKey{fmt.Sprintf("db%d", dbs), i}] = r
				}
			}
			addDB()
			if rng.Intn(2) == 0 {
				addDB()
			}
			c = next(c, mustPlace(t, c))

			for step := range 6 {
				op := rng.Intn(7)
				switch op {
				case 0: // add one to three nodes
					for range 1 + rng.Intn(3) {
						c.Nodes = append(c.Nodes, newNode())
					}
				case 1: // a node disappears
					if len(c.Nodes) > 1 {
						i := rng.Intn(len(c.Nodes))
						c.Nodes = slices.Delete(c.Nodes, i, i+1)
					}
				case 2: // drain
					c.Nodes[rng.Intn(len(c.Nodes))].Draining = true
				case 3: // undrain
					c.Nodes[rng.Intn(len(c.Nodes))].Draining = false
				case 4: // replica factor change of one database
					db := fmt.Sprintf("db%d", 1+rng.Intn(dbs))
					r := 1 + rng.Intn(3)
					for k := range c.Want {
						if k.DB == db {
							c.Want[k] = r
						}
					}
				case 5:
					addDB()
				case 6: // drop a database
					db := fmt.Sprintf("db%d", 1+rng.Intn(dbs))
					for k := range c.Want {
						if k.DB == db {
							delete(c.Want, k)
						}
					}
				}
				plan, err := Place(c)
				if maxWant(c) > countLive(c.Nodes) {
					require.ErrorIs(t, err, ErrNotEnoughNodes, "step %d op %d", step, op)
					// Undo what made it impossible: bring back enough nodes.
					for i := range c.Nodes {
						c.Nodes[i].Draining = false
					}
					for countLive(c.Nodes) < maxWant(c) {
						c.Nodes = append(c.Nodes, newNode())
					}
					plan, err = Place(c)
				}
				require.NoError(t, err, "step %d op %d", step, op)
				checkPlan(t, c, plan)
				c = next(c, plan)
			}
		})
	}
}

func countLive(nodes []Node) int {
	n := 0
	for _, x := range nodes {
		if !x.Draining {
			n++
		}
	}
	return n
}

func maxWant(c Cluster) int {
	m := 0
	for _, r := range c.Want {
		m = max(m, r)
	}
	return m
}
