package master

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The failover check's terms computed once per cluster (RecordedTerms,
// SeenTerms) give every shard the same live term as reading every live
// node's record for it.
func TestCachedTermsSameAsPerShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := map[string]models.StorageNode{}
	for i := range 20 {
		n := models.StorageNode{NodeID: fmt.Sprintf("n%d", i), MaxTerm: map[string]int64{}, SeenTerm: map[string]int64{}}
		for s := range 8 {
			id := models.ShardID("d", s)
			if rng.IntN(3) == 0 {
				n.MaxTerm[id] = rng.Int64N(10)
			}
			if rng.IntN(3) == 0 {
				n.SeenTerm[id] = rng.Int64N(12)
			}
		}
		nodes[n.NodeID] = n
	}
	live := statemachine.MapOf(nodes)
	var d derived
	recorded := d.recordedTerms(live, "c")
	cached := ShardInputs{DB: "d", Live: live, RecordedTerms: recorded, SeenTerms: d.seen}
	require.NotNil(t, cached.SeenTerms)
	plain := ShardInputs{DB: "d", Live: live}
	for s := range 8 {
		require.Equal(t, liveTerm(plain, s), liveTerm(cached, s), "shard %d", s)
	}
}
