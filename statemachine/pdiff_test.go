package statemachine

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// Changed names every key set or deleted between two snapshots (set again
// to the same value counts), and otherwise only keys either holds, through
// random edits, with collisions forced by a weak hash.
func TestChangedNamesWhatChanged(t *testing.T) {
	for _, weak := range []bool{false, true} {
		if weak {
			saved := phash
			phash = func(k string) uint64 { return uint64(len(k) % 3) }
			t.Cleanup(func() { phash = saved })
		}
		rng := rand.New(rand.NewSource(3))
		cur := Map[int]{}
		for round := range 200 {
			old, want := cur, map[string]bool{}
			for range rng.Intn(6) {
				k := fmt.Sprintf("k%d", rng.Intn(300))
				if rng.Intn(3) == 0 {
					if old.Has(k) || want[k] {
						want[k] = true
					}
					cur = cur.Delete(k)
				} else {
					cur = cur.Set(k, rng.Intn(2))
					want[k] = true
				}
			}
			for k := range want { // deleted again after set: absent from both
				if !old.Has(k) && !cur.Has(k) {
					delete(want, k)
				}
			}
			got := map[string]bool{}
			Changed(old, cur, func(k string) { got[k] = true })
			for k := range want {
				require.True(t, got[k], "round %d: %s changed", round, k)
			}
			for k := range got {
				if !want[k] {
					// A neighbour in the trie may be named too: a key named
					// is at least held by one of them.
					require.True(t, old.Has(k) || cur.Has(k), "round %d: %s named", round, k)
				}
			}
		}
		var same []string
		Changed(cur, cur, func(k string) { same = append(same, k) })
		require.Empty(t, same)
		if !weak {
			named := 0
			Changed(cur, cur.Set("k1", 5), func(string) { named++ })
			require.LessOrEqual(t, named, 3, "one change names its key and at most a few neighbours")
		}
	}
}
