package master_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// owned reads every key the master owns, with its mod revision.
func (h *harness) owned() map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, p := range []string{h.keys.AssignPrefix(), h.keys.ShardStatePrefix(), h.keys.NS + "/failover/"} {
		kvs, _, err := h.store.List(context.Background(), p)
		require.NoError(h.t, err)
		for _, kvp := range kvs {
			out[kvp.Key] = fmt.Sprintf("%d:%s", kvp.ModRev, kvp.Value)
		}
	}
	return out
}

func TestDeposedMasterWritesNothing(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	a := h.startMaster(masterOpts{shadow: true})
	h.createDB("dep", 3, 2)
	a.stop()
	// A's election lease ends (A, paused, has not noticed: its own session
	// still looks alive) and B wins.
	require.NoError(t, h.store.Revoke(context.Background(), a.election.Lease()))
	b := h.startMaster(masterOpts{})
	require.Greater(t, b.term, a.term)
	h.settle(b)
	b.stop()

	// A resumes with its old term and is asked for a leader transfer.
	before, rev := h.owned(), h.lastRev()
	a.start()
	st := h.sm.Snapshot()
	s0, _ := st.ShardState("dep", 0)
	other := notExpected(s0.Leader, st.Assignments.At("dep").Shards[0].Replicas[0], st.Assignments.At("dep").Shards[0].Replicas[1])
	err := a.TransferLeader(context.Background(), "dep", 0, models.LeaderTransfer{NodeID: other})
	require.ErrorIs(t, err, kv.ErrDeposed)
	require.ErrorIs(t, a.wait(t), kv.ErrDeposed)
	require.Equal(t, rev, h.lastRev(), "a deposed master changed etcd")
	require.Equal(t, before, h.owned())

	// A leader dies; A's reconcile tries to fail it over and is fenced off.
	h.kill(s0.Leader)
	h.eventually("leader gone", func(st *statemachine.State) bool { _, ok := st.Nodes.At(cluster).Get(s0.Leader); return !ok })
	a.start()
	require.ErrorIs(t, a.wait(t), kv.ErrDeposed)
	require.Equal(t, before, h.owned(), "a deposed master's failover changed etcd")
	require.Equal(t, s0, h.etcdStates("dep").Shards[0])
}

func TestTwoMastersNeverSplitLeadership(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	h := newHarness(t, nodes...)
	states := h.collect(h.keys.ShardStatePrefix())
	// A is a separate process with its own state copy; B uses the harness's.
	smA := h.newManager()
	h.eventually("A's state loaded", func(*statemachine.State) bool { return smA.Snapshot().Nodes.At(cluster).Len() == len(nodes) })
	a := h.startMaster(masterOpts{sm: smA, shadow: true})
	h.createDB("x", 8, 2)
	h.createDB("y", 4, 3)

	// A keeps acting as if master (a paused process resuming), restarted
	// whenever a fenced write throws it out.
	var mu sync.Mutex
	deposed := 0
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	a.stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := a.Run(ctx)
			if errors.Is(err, kv.ErrDeposed) {
				mu.Lock()
				deposed++
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	require.NoError(t, h.store.Revoke(context.Background(), a.election.Lease()))
	b := h.startMaster(masterOpts{})

	// Both see the same node deaths and returns and race to act on them.
	for _, n := range []string{"n1", "n2"} {
		h.kill(n)
		h.eventually(n+" failed over", func(st *statemachine.State) bool {
			return noneLedBy(st.ShardStates.At("x"), n) && noneLedBy(st.ShardStates.At("y"), n)
		})
	}
	h.register("n1", nil)
	h.eventually("x online again", func(st *statemachine.State) bool { return allOnline(st, "x", 8) })
	// A forced attempt, so at least one of A's writes certainly met the fence:
	// move a shard's leadership to a live follower.
	require.Eventually(t, func() bool {
		st := smA.Snapshot()
		for _, sh := range st.Assignments.At("x").Shards {
			s, _ := st.ShardState("x", sh.ID)
			for _, r := range sh.Replicas {
				if _, live := st.Nodes.At(cluster).Get(r); live && r != s.Leader && s.Status == models.StatusOnline {
					err := a.TransferLeader(ctx, "x", sh.ID, models.LeaderTransfer{NodeID: r})
					return errors.Is(err, kv.ErrDeposed)
				}
			}
		}
		return false
	}, waitFor, pollTick, "A's transfer refused as deposed")
	h.settle(b)

	seen := map[string]string{}
	writes := 0
	for _, kvp := range states.all(t) {
		var ss models.ShardStates
		require.NoError(t, json.Unmarshal(kvp.Value, &ss))
		for _, s := range ss.Shards {
			if s.Status != models.StatusOnline {
				continue
			}
			writes++
			k := fmt.Sprintf("%s/%d@%d", ss.DB, s.ID, s.Term)
			if prev, ok := seen[k]; ok {
				require.Equal(t, prev, s.Leader, "two leaders for %s", k)
			}
			seen[k] = s.Leader
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d shard states checked over %d (db, shard, term) triples; A deposed %d times", writes, len(seen), deposed)
	require.Positive(t, deposed)
	require.Greater(t, len(seen), 12, "failovers happened")
}
