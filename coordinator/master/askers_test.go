package master

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestFailoverRoundAsksEveryNodeAtOnce: a round over 300 nodes (more than
// the old 256 askers) has every question in flight together, and each
// node's answer counts. The fake nodes answer only once all of them are
// asked: with 256 at a time the first 256 ran out their timeout holding
// the slots and no node answered (at 1,000 simulated nodes a whole
// domain's round took ~1 s, with 160-410 nodes never asked and 160-260
// timing out).
func TestFailoverRoundAsksEveryNodeAtOnce(t *testing.T) {
	const n = 300
	live := map[string]models.StorageNode{}
	in := ShardInputs{DB: "d"}
	for i := range n {
		id := fmt.Sprintf("n%03d", i)
		live[id] = models.StorageNode{NodeID: id, NodeAddress: "127.0.0.1:" + fmt.Sprint(20000+i)}
		in.Assign.Shards = append(in.Assign.Shards, models.ShardAssignment{ID: i, Replicas: []string{"dead", id}})
		in.States.Shards = append(in.States.Shards, models.ShardState{ID: i, Leader: "dead", Term: 1, Status: models.StatusOnline})
	}
	in.Live = statemachine.MapOf(live)

	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	asks := func(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == n {
			close(all)
		}
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out := map[string]map[int]models.ReplicaTxn{}
		for db, ids := range shards {
			out[db] = map[int]models.ReplicaTxn{}
			for _, id := range ids {
				out[db][id] = models.ReplicaTxn{LastTxnID: 7, LastTerm: 1}
			}
		}
		return out, nil
	}
	got := gatherTxn(context.Background(), nil, asks, 2*time.Second, 0, []ShardInputs{in}, zap.NewNop())
	require.Equal(t, n, most, "every node's question in flight at once")
	require.Len(t, got[0], n)
	for id, answers := range got[0] {
		require.Len(t, answers, 1, "shard %d: its live replica answered", id)
	}
}
