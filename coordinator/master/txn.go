package master

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// AskTxnFunc asks the storage node node for the last txn ids of its
// replicas of db's shards (one request for all of them).
type AskTxnFunc func(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error)

// maxAskers bounds the requests of one failover in flight at once.
const maxAskers = 64

// anyNeedsLeader: some shard of in must get a new leader or stay offline.
func anyNeedsLeader(in ShardInputs) bool {
	cur := make(map[int]models.ShardState, len(in.States.Shards))
	for _, s := range in.States.Shards {
		cur[s.ID] = s
	}
	for _, sh := range in.Assign.Shards {
		st, ok := cur[sh.ID]
		if needsLeader(in, sh, st, ok) {
			return true
		}
	}
	return false
}

// gatherTxn asks the live in-sync replicas of every shard of in that needs a
// new leader for their last txn id: one request per node, all in parallel,
// each bounded by timeout. Nodes that fail or do not answer in time are left
// out (the decision skips them). The answers feed PlanLeaders, which stays a
// pure function of them. nil when nothing needs a leader or nobody can be
// asked.
func gatherTxn(ctx context.Context, ask AskTxnFunc, timeout time.Duration, in ShardInputs, lg *zap.Logger) map[int]map[string]models.ReplicaTxn {
	if ask == nil {
		return nil
	}
	cur := map[int]models.ShardState{}
	for _, s := range in.States.Shards {
		cur[s.ID] = s
	}
	byNode := map[string][]int{}
	for _, sh := range in.Assign.Shards {
		st, ok := cur[sh.ID]
		if !needsLeader(in, sh, st, ok) {
			continue
		}
		cands, _ := candidates(in, sh)
		for _, n := range cands {
			byNode[n] = append(byNode[n], sh.ID)
		}
	}
	if len(byNode) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := map[int]map[string]models.ReplicaTxn{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxAskers)
	// Every asked shard gets its (empty) answer map before any question goes
	// out: the askers then only fill them, under mu.
	for _, shards := range byNode {
		for _, id := range shards {
			if out[id] == nil {
				out[id] = map[string]models.ReplicaTxn{} // asked: silence now counts
			}
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		shards := byNode[node]
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-actx.Done():
				return
			}
			got, err := ask(actx, models.NodeRef{NodeID: node, Address: in.Live.At(node).NodeAddress}, in.DB, shards)
			if err != nil {
				lg.Warn("replica did not answer the last txn id question; skipped", zap.String("db", in.DB),
					zap.String("node_id", node), zap.Ints("shards", shards), zap.Error(err))
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range shards {
				if a, ok := got[id]; ok {
					out[id][node] = a
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range slices.Sorted(maps.Keys(out)) {
		lg.Info("failover answers", zap.String("db", in.DB), zap.Int("shard", id), zap.Any("last_txn_ids", out[id]))
	}
	return out
}
