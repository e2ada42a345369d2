package master_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// opEvents records every change under the operator prefix.
type opEvents struct {
	mu  sync.Mutex
	evs []kv.RawEvent
}

func (h *harness) watchOperators() *opEvents {
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	e := &opEvents{}
	ch := h.store.Watch(ctx, h.keys.OperatorPrefix(), 1)
	go func() {
		for r := range ch {
			e.mu.Lock()
			e.evs = append(e.evs, r.Events...)
			e.mu.Unlock()
		}
	}()
	return e
}

func (e *opEvents) of(key string) []kv.RawEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []kv.RawEvent
	for _, ev := range e.evs {
		if ev.KV.Key == key {
			out = append(out, ev)
		}
	}
	return out
}

// listedOperators reads GET /api/v1/operators.
func (h *harness) listedOperators() []master.Operator {
	h.t.Helper()
	code, body := h.do(http.MethodGet, "/api/v1/operators", nil)
	require.Equal(h.t, http.StatusOK, code, body)
	var out struct {
		Operators []master.Operator `json:"operators"`
	}
	require.NoError(h.t, json.Unmarshal([]byte(body), &out))
	return out.Operators
}

// TestLeaderTransferIsAnOperator: POST .../leader persists a transfer-leader
// operator (fenced), and the executor carries it out in one fenced txn that
// publishes the new leader and deletes the record; when that step cannot
// run, the operator stays in flight, listed by GET /api/v1/operators, and
// the next master resumes it.
func TestLeaderTransferIsAnOperator(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.http = web.New(web.Config{NodeID: "test", State: h.sm.Snapshot, Broker: adminOnly{h.admin}, Logger: logger(t),
		Master: operatorsView{h}}).Handler()
	rm := h.startMaster(masterOpts{})
	h.admin.Master = rm
	h.createDB("t", 2, 3)
	events := h.watchOperators()
	ctx := context.Background()

	// The plain path: accepted once the new leader is published.
	s0 := h.etcdStates("t").Shards[0]
	to := minus([]string{"n1", "n2", "n3"}, []string{s0.Leader})[0]
	code, body := h.do(http.MethodPost, "/api/v1/databases/t/shards/0/leader", map[string]any{"node_id": to})
	require.Equal(t, http.StatusAccepted, code, body)
	now := h.etcdStates("t").Shards[0]
	require.Equal(t, to, now.Leader, "published before the answer")
	require.Equal(t, s0.Term+1, now.Term)
	key := h.keys.Operator("t", 0)
	require.Eventually(t, func() bool { return len(events.of(key)) == 2 }, waitFor, pollTick)
	evs := events.of(key)
	require.Equal(t, kv.EventPut, evs[0].Type, "the operator is persisted first")
	var op master.Operator
	require.NoError(t, json.Unmarshal(evs[0].KV.Value, &op))
	require.Equal(t, master.OpLeader, op.Kind)
	require.Equal(t, to, op.Leader)
	require.Equal(t, s0.Leader, op.FromLeader)
	require.Equal(t, master.StepLeader, op.Step)
	require.Equal(t, rm.term, op.MasterTerm)
	require.Equal(t, kv.EventDelete, evs[1].Type)
	st, err := h.store.Get(ctx, h.keys.ShardState("t"))
	require.NoError(t, err)
	require.Equal(t, st.ModRev, evs[1].KV.ModRev, "the record is deleted in the txn that publishes the leader")
	require.Empty(t, h.listedOperators())

	// Asking again for the leader it has is a no-op: no operator.
	code, body = h.do(http.MethodPost, "/api/v1/databases/t/shards/0/leader", map[string]any{"node_id": to})
	require.Equal(t, http.StatusAccepted, code, body)
	require.Len(t, events.of(key), 2)

	// Refusals change nothing.
	for _, c := range []struct {
		body map[string]any
		code int
	}{
		{map[string]any{"node_id": "n9"}, http.StatusUnprocessableEntity},
		{map[string]any{"node_id": to, "bogus": 1}, http.StatusBadRequest},
	} {
		code, body := h.do(http.MethodPost, "/api/v1/databases/t/shards/1/leader", c.body)
		require.Equal(t, c.code, code, body)
	}
	code, body = h.do(http.MethodPost, "/api/v1/databases/t/shards/9/leader", map[string]any{"node_id": to})
	require.Equal(t, http.StatusNotFound, code, body)
	require.Empty(t, events.of(h.keys.Operator("t", 1)))

	// The executor's step cannot run while t's shard states are unreadable
	// (its compare fails): the transfer stays in flight and is listed.
	good, err := h.store.Get(ctx, h.keys.ShardState("t"))
	require.NoError(t, err)
	rev, err := h.store.Put(ctx, h.keys.ShardState("t"), []byte(`{"db":"t","shards":"not a list"}`), 0)
	require.NoError(t, err)
	h.eventually("poisoned value seen", func(st *statemachine.State) bool { return st.Revisions[statemachine.SourceShardState] >= rev })
	s1, _ := h.sm.Snapshot().ShardState("t", 1)
	to1 := minus([]string{"n1", "n2", "n3"}, []string{s1.Leader})[0]
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = rm.TransferLeader(tctx, "t", 1, models.LeaderTransfer{NodeID: to1})
	cancel()
	require.ErrorIs(t, err, models.ErrUnavailable)
	listed := h.listedOperators()
	require.Len(t, listed, 1)
	require.Equal(t, "t", listed[0].DB)
	require.Equal(t, 1, listed[0].Shard)
	require.Equal(t, master.OpLeader, listed[0].Kind)
	require.Equal(t, to1, listed[0].Leader)

	// The term ends with it in flight; the next master resumes it once the
	// states are readable again.
	rm.stop()
	require.NoError(t, h.store.Revoke(ctx, rm.election.Lease()))
	_, err = h.store.Put(ctx, h.keys.ShardState("t"), good.Value, 0)
	require.NoError(t, err)
	h.startMaster(masterOpts{})
	h.waitShard("t", 1, "the resumed transfer published", func(s models.ShardState) bool {
		return s.Leader == to1 && s.Status == models.StatusOnline && s.Term > s1.Term
	})
	require.Eventually(t, func() bool { return len(h.operators()) == 0 }, waitFor, pollTick, "operator record left behind")
}

// A leader transfer of a shard that a move is relocating is refused (409):
// one operator per shard, and the move's own leader step comes first.
func TestLeaderTransferRefusedDuringAMove(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	rm := h.startMaster(masterOpts{})
	h.createDB("mv", 1, 2)
	rm.stop()
	require.NoError(t, h.store.Revoke(context.Background(), rm.election.Lease()))

	// A move persisted by the previous term whose new replica never
	// catches up (its in-sync set leaves it out): it stays in flight.
	sh := h.sm.Snapshot().Assignments.At("mv").Shards[0]
	other := minus([]string{"n1", "n2", "n3"}, sh.Replicas)[0]
	s, _ := h.sm.Snapshot().ShardState("mv", 0)
	h.writeISR("mv", 0, models.ISR{Leader: s.Leader, Term: s.Term, Replicas: sh.Replicas})
	h.eventually("in-sync set seen", func(st *statemachine.State) bool {
		return st.ISR.At(cluster).At(models.ShardID("mv", 0)).Term == s.Term
	})
	op := master.Operator{DB: "mv", Shard: 0, Kind: master.OpMove, From: sh.Replicas, To: []string{s.Leader, other},
		Step: master.StepAdd, MasterTerm: rm.term, Created: time.Now()}
	_, err := h.store.Put(context.Background(), h.keys.Operator("mv", 0), mustJSON(t, op), 0)
	require.NoError(t, err)
	rm2 := h.startMaster(masterOpts{})
	h.admin.Master = rm2
	h.eventually("the move added its replica", func(st *statemachine.State) bool {
		return slices.Contains(st.Assignments.At("mv").Shards[0].Replicas, other)
	})
	peer := minus(sh.Replicas, []string{s.Leader})[0]
	code, body := h.do(http.MethodPost, "/api/v1/databases/mv/shards/0/leader", map[string]any{"node_id": peer})
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "move operator in flight")
	require.Equal(t, s.Leader, h.etcdStates("mv").Shards[0].Leader, "the refused transfer changed nothing")
	ops := h.operators()
	require.Len(t, ops, 1)
	require.Equal(t, master.OpMove, ops[0].Kind)
}

// A transfer whose target stops qualifying before its step runs is dropped
// and its caller told so (422), not left waiting.
func TestLeaderTransferDroppedWhenTargetDies(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	rm := h.startMaster(masterOpts{})
	h.admin.Master = rm
	h.createDB("d", 1, 3)
	ctx := context.Background()
	// Unreadable shard states hold the step back while the target dies.
	rev, err := h.store.Put(ctx, h.keys.ShardState("d"), []byte(`{"db":"d","shards":"not a list"}`), 0)
	require.NoError(t, err)
	h.eventually("poisoned value seen", func(st *statemachine.State) bool { return st.Revisions[statemachine.SourceShardState] >= rev })
	s, _ := h.sm.Snapshot().ShardState("d", 0)
	to := minus([]string{"n1", "n2", "n3"}, []string{s.Leader})[0]
	done := make(chan error, 1)
	go func() { done <- rm.TransferLeader(ctx, "d", 0, models.LeaderTransfer{NodeID: to}) }()
	require.Eventually(t, func() bool { return len(h.operators()) == 1 }, waitFor, pollTick)
	h.kill(to)
	select {
	case err := <-done:
		require.ErrorIs(t, err, models.ErrImpossible)
		require.Contains(t, err.Error(), fmt.Sprintf("to %q was dropped", to))
	case <-time.After(waitFor):
		t.Fatal("the caller was never told")
	}
	require.Eventually(t, func() bool { return len(h.operators()) == 0 }, waitFor, pollTick, "dropped operator's record left behind")
}
