package web

import (
	"context"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// progressTimeout bounds each node's answer to a progress question.
const progressTimeout = 2 * time.Second

// AddProgress fills each view's Progress with every replica's last txn id
// and terms, asked now of the live nodes hosting them: one request per node
// (for all its replicas of db), all in parallel, each bounded by timeout.
// Nothing about it is kept in etcd, so a cluster at rest writes nothing for
// it. A replica whose node is not live, failed or did not answer in time is
// listed in Unanswered.
func AddProgress(ctx context.Context, ask func(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error),
	timeout time.Duration, db string, views []models.ShardView, live statemachine.Map[models.StorageNode]) {
	byNode := map[string][]int{}
	for _, v := range views {
		for _, n := range v.Replicas {
			byNode[n] = append(byNode[n], v.ID)
		}
	}
	answers := map[string]map[int]models.ReplicaTxn{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, shards := range byNode {
		rec, ok := live.Get(node)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			got, err := ask(actx, models.NodeRef{NodeID: node, Address: rec.NodeAddress}, db, shards)
			if err != nil {
				return
			}
			mu.Lock()
			answers[node] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range views {
		v := &views[i]
		v.Progress = map[string]models.ReplicaTxn{}
		for _, n := range v.Replicas {
			if a, ok := answers[n][v.ID]; ok {
				v.Progress[n] = a
			} else {
				v.Unanswered = append(v.Unanswered, n)
			}
		}
	}
}
