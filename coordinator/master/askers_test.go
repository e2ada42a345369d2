package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// TestBoundedRoundEndsWithoutItsAskers: a round whose sets are all trusted
// ends at its patience even while a question is still out and does not
// heed its cancellation (an asker in a process too busy to notice it):
// gatherTxn returns with the answers it has, and the answer that comes
// after is not recorded into what it returned.
func TestBoundedRoundEndsWithoutItsAskers(t *testing.T) {
	in := ShardInputs{DB: "d"}
	live := map[string]models.StorageNode{}
	for _, id := range []string{"quick", "stuck"} {
		live[id] = models.StorageNode{NodeID: id, NodeAddress: id + ":1"}
	}
	in.Live = statemachine.MapOf(live)
	in.Assign.Shards = []models.ShardAssignment{
		{ID: 0, Replicas: []string{"dead", "quick"}},
		{ID: 1, Replicas: []string{"dead", "stuck"}},
	}
	in.States.Shards = []models.ShardState{
		{ID: 0, Leader: "dead", Term: 1, Status: models.StatusOnline},
		{ID: 1, Leader: "dead", Term: 1, Status: models.StatusOnline},
	}
	in.ISR = statemachine.MapOf(map[string]models.ISR{
		models.ShardID("d", 0): {Leader: "dead", Term: 1, Replicas: []string{"dead", "quick"}},
		models.ShardID("d", 1): {Leader: "dead", Term: 1, Replicas: []string{"dead", "stuck"}},
	})
	in.ClusterID = 1
	require.False(t, newRound([]ShardInputs{in}).stale, "both sets are trusted: the round is bounded")

	release, answered := make(chan struct{}), make(chan struct{})
	asks := func(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
		if node.NodeID == "stuck" {
			<-release // deaf to ctx
			defer close(answered)
		}
		out := map[string]map[int]models.ReplicaTxn{}
		for db, ids := range shards {
			out[db] = map[int]models.ReplicaTxn{}
			for _, id := range ids {
				out[db][id] = models.ReplicaTxn{LastTxnID: 9, LastTerm: 1}
			}
		}
		return out, nil
	}
	var got []map[int]map[string]models.ReplicaTxn
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		got = gatherTxn(context.Background(), nil, asks, time.Minute, 20*time.Millisecond, []ShardInputs{in}, zap.NewNop())
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the round waited for its stuck asker")
	}
	require.Len(t, got[0][0], 1, "the quick answer counts")
	require.Empty(t, got[0][1], "the stuck node had not answered when the round ended")
	close(release)
	<-answered
	require.Never(t, func() bool { return len(got[0][1]) > 0 }, 200*time.Millisecond, 5*time.Millisecond,
		"its answer after the round's end is dropped")
}

// TestBoundedRoundCountsOnlyTheLate: the round's one line about the nodes
// it ended without counts the node still out at the patience, not the one
// whose failure was already logged on its own line.
func TestBoundedRoundCountsOnlyTheLate(t *testing.T) {
	in := ShardInputs{DB: "d", ClusterID: 1}
	live := map[string]models.StorageNode{}
	sets := map[string]models.ISR{}
	for i, id := range []string{"quick", "broken", "slow"} {
		live[id] = models.StorageNode{NodeID: id, NodeAddress: id + ":1"}
		in.Assign.Shards = append(in.Assign.Shards, models.ShardAssignment{ID: i, Replicas: []string{"dead", id}})
		in.States.Shards = append(in.States.Shards, models.ShardState{ID: i, Leader: "dead", Term: 1, Status: models.StatusOnline})
		sets[models.ShardID("d", i)] = models.ISR{Leader: "dead", Term: 1, Replicas: []string{"dead", id}}
	}
	in.Live, in.ISR = statemachine.MapOf(live), statemachine.MapOf(sets)
	asks := func(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
		switch node.NodeID {
		case "broken":
			return nil, errors.New("connection refused")
		case "slow":
			<-ctx.Done()
			return nil, ctx.Err()
		}
		out := map[string]map[int]models.ReplicaTxn{"d": {}}
		for _, id := range shards["d"] {
			out["d"][id] = models.ReplicaTxn{LastTxnID: 9, LastTerm: 1}
		}
		return out, nil
	}
	core, logs := observer.New(zap.InfoLevel)
	gatherTxn(context.Background(), nil, asks, time.Minute, 50*time.Millisecond, []ShardInputs{in}, zap.New(core))
	require.Len(t, logs.FilterMessageSnippet("did not answer the last txn id question").All(), 1, "the broken node's own line")
	ended := logs.FilterMessageSnippet("ended at its patience").All()
	require.Len(t, ended, 1)
	require.EqualValues(t, 1, ended[0].ContextMap()["questions"], "only the slow node was cut off")
}
