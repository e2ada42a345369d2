package master_test

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// laggingState is what a master reads when its watch of assignments and
// shard states falls behind: while held, those two sources (values, mod
// revisions and revisions) stay as they were when the hold began, every
// other source is live. With db set, only that database's shard states
// (and their mod revision) lag.
type laggingState struct {
	sm   *statemachine.Manager
	db   string
	mu   sync.Mutex
	held *statemachine.State
}

func (l *laggingState) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = l.sm.Snapshot()
}

func (l *laggingState) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = nil
}

func (l *laggingState) State() *statemachine.State {
	live := l.sm.Snapshot()
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	if held == nil {
		return live
	}
	st := *live
	if l.db != "" {
		src := statemachine.SourceShardState
		st.ShardStates = live.ShardStates.Set(l.db, held.ShardStates.At(l.db))
		st.ModRevs = maps.Clone(live.ModRevs)
		st.ModRevs[src] = live.ModRevs[src].Set(l.db, held.ModRev(src, l.db))
		return &st
	}
	st.Assignments, st.ShardStates = held.Assignments, held.ShardStates
	st.ModRevs, st.Revisions = maps.Clone(live.ModRevs), maps.Clone(live.Revisions)
	for _, src := range []string{statemachine.SourceAssign, statemachine.SourceShardState} {
		st.ModRevs[src], st.Revisions[src] = held.ModRevs[src], held.Revisions[src]
	}
	return &st
}

// postDB creates a database through the HTTP API without waiting for it.
func (h *harness) postDB(name string, shards, rf int) {
	h.t.Helper()
	code, body := h.do(http.MethodPost, "/api/v1/databases",
		map[string]any{"name": name, "num_shards": shards, "replica_factor": rf})
	require.Equal(h.t, http.StatusCreated, code, body)
}

// putsPerKey counts the writes of each key among kvs.
func putsPerKey(kvs []kv.KeyValue) map[string]int {
	out := map[string]int{}
	for _, kvp := range kvs {
		out[kvp.Key]++
	}
	return out
}

// TestPipelinedPlacementNeverPlacesTwice: the master places new databases
// without waiting for its writes to come back through its watch. While its
// state does not show them, the next databases are placed on a view that
// includes them (the replicas spread over every node, not piled on the same
// two), none is placed again, and past the wait for its watch a database is
// synced on the stale state and still not placed twice (the guards refuse).
func TestPipelinedPlacementNeverPlacesTwice(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	h := newHarness(t, nodes...)
	assigns := h.collect(h.keys.AssignPrefix())
	lag := &laggingState{sm: h.sm}
	lag.hold()
	clock := &skewClock{}
	rm := h.startMaster(masterOpts{state: lag.State, now: clock.Now, firstSets: true})
	for _, db := range []string{"p1", "p2", "p3"} {
		h.postDB(db, 1, 2)
		// Placed (etcd shows it) while the master's state does not.
		h.eventually(db+" placed", func(st *statemachine.State) bool { return allOnline(st, db, 1) })
		require.False(t, lag.State().Assignments.Has(db))
	}
	h.settle(rm)
	replicas, _ := counts(h.sm.Snapshot(), nodes)
	for _, n := range nodes {
		require.Equal(t, 1, replicas[n], "node %s: each batch was placed on a view with the ones before it", n)
	}
	// The watch still lags after the master stopped waiting for it: the
	// databases are synced on a state without their assignments.
	clock.Advance(time.Minute)
	h.settle(rm)
	h.settle(rm)
	for k, n := range putsPerKey(assigns.all(t)) {
		require.Equal(t, 1, n, "%s written %d times", k, n)
	}
	require.Len(t, putsPerKey(assigns.all(t)), 3)

	lag.release()
	h.postDB("p4", 2, 2)
	h.eventually("p4 placed", func(st *statemachine.State) bool { return allOnline(st, "p4", 2) })
	h.settle(rm)
	puts := putsPerKey(assigns.all(t))
	require.Len(t, puts, 4)
	for k, n := range puts {
		require.Equal(t, 1, n, "%s written %d times", k, n)
	}
}

// TestPipelinedPlacementDeposed: a deposed master whose state lags behind
// its own placements places nothing more: its next placement is fenced off
// by the election term and its term ends.
func TestPipelinedPlacementDeposed(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	lag := &laggingState{sm: h.sm}
	lag.hold()
	a := h.startMaster(masterOpts{shadow: true, state: lag.State})
	h.postDB("d1", 2, 2)
	h.eventually("d1 placed", func(st *statemachine.State) bool { return allOnline(st, "d1", 2) })
	a.stop()
	require.NoError(t, h.store.Revoke(context.Background(), a.election.Lease()))
	b := h.startMaster(masterOpts{})
	require.Greater(t, b.term, a.term)
	h.settle(b)
	b.stop()

	// A new database while nobody is master; A, paused with its old term
	// and a state still without d1, resumes.
	h.postDB("d2", 2, 2)
	h.eventually("d2 known", func(st *statemachine.State) bool { return st.Databases.Has("d2") })
	before, rev := h.owned(), h.lastRev()
	a.start()
	require.ErrorIs(t, a.wait(t), kv.ErrDeposed)
	require.Equal(t, rev, h.lastRev(), "a deposed master changed etcd")
	require.Equal(t, before, h.owned())
	require.False(t, h.sm.Snapshot().Assignments.Has("d2"))
	_, ok := h.sm.Snapshot().Assignments.Get("d1")
	require.True(t, ok)
	require.Equal(t, models.StatusOnline, h.etcdStates("d1").Shards[0].Status)
}
