package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestPublicationBatchesDoNotWaitForTheLocalState: a publication of more
// batches than publishWriters puts every batch's states in etcd while the
// master's local state has not shown any of them yet (it waits for that
// once, at the end). Each writer used to wait for the local state to show
// its own batch before it took the next one: with the state manager behind
// (the agents' in-sync writes go through it too), the later batches of a
// whole domain's failover queued behind the first ones' waits. The locks
// are released either way; a publication the local state never shows
// fails.
func TestPublicationBatchesDoNotWaitForTheLocalState(t *testing.T) {
	ctx := context.Background()
	store := etcdtest.Start(t).Store(t)
	keys := models.Keys{NS: "/cairn"}
	session, err := kv.NewSession(ctx, store, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close(context.Background()) })
	el := kv.NewElection(store, keys.Master())
	term, err := el.Campaign(ctx, session, []byte(`{"node_id":"m"}`))
	require.NoError(t, err)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(ctx)
	t.Cleanup(sm.Stop)
	frozen := sm.Snapshot() // never shows what is published
	m := New(Config{Store: store, Keys: keys, Election: el, Term: term, Session: session, NodeID: "m",
		State: func() *statemachine.State { return frozen }, Changed: sm.Changed})

	// Each database fills a txn (its lock, its states, maxTxnOps-2
	// operator records): a batch of its own.
	n := publishWriters + 4
	var ups []statesUpdate
	for i := range n {
		db := fmt.Sprintf("db%02d", i)
		next := models.ShardStates{DB: db}
		var changed []int
		var extra []kv.Op
		for s := range maxTxnOps - 2 {
			next.Shards = append(next.Shards, models.ShardState{ID: s, Leader: "n2", Term: 2, Status: models.StatusOnline})
			changed = append(changed, s)
			extra = append(extra, kv.OpPut(keys.Operator(db, s), []byte(`{}`), 0))
		}
		ups = append(ups, statesUpdate{db: db, next: next, changed: changed, extra: extra})
	}
	require.Len(t, txnBatches(ups), n)

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan map[string]error, 1)
	go func() { result <- m.publishBatch(pctx, frozen, ups) }()
	published := func() int {
		kvs, _, err := store.List(ctx, keys.ShardStatePrefix())
		require.NoError(t, err)
		return len(kvs)
	}
	// Well within awaitRev's 5 s: the old writers would still hold the
	// first publishWriters batches.
	require.Eventually(t, func() bool { return published() == n }, 3*time.Second, 10*time.Millisecond,
		"every batch published while the local state shows none")
	cancel()
	failed := <-result
	require.Len(t, failed, n, "not shown by the local state: failed")
	locks, _, err := store.List(ctx, keys.NS+"/failover/")
	require.NoError(t, err)
	require.Empty(t, locks, "the locks are released before publishBatch returns")
}
