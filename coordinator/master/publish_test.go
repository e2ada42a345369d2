package master_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// leaderOfEach reports whether node leads an online shard of every one of dbs.
func leaderOfEach(ss map[string]models.ShardStates, node string) bool {
	for _, s := range ss {
		if noneLedBy(s, node) {
			return false
		}
	}
	return true
}

// sameTxn requires the shard states of dbs to have been written by one txn.
func (h *harness) sameTxn(dbs ...string) {
	h.t.Helper()
	var rev int64
	for _, db := range dbs {
		kvp, err := h.store.Get(context.Background(), h.keys.ShardState(db))
		require.NoError(h.t, err)
		if rev == 0 {
			rev = kvp.ModRev
		}
		require.Equal(h.t, rev, kvp.ModRev, "%s published in the same txn as %s", db, dbs[0])
	}
}

// TestFailoverPublishesDatabasesInOneTxn: the new leaders of every database
// a dead node led are published together, in one txn (the databases' states
// share its revision), and the failover locks are released. When one
// database's states changed since the master read them, the batch is
// refused for it alone: the others are still published together, it is
// retried and published once the master reads its new states.
func TestFailoverPublishesDatabasesInOneTxn(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	stale := &laggingState{sm: h.sm, db: "b"}
	h.startMaster(masterOpts{state: stale.State})
	dbs := []string{"a", "b", "c"}
	for _, db := range dbs {
		h.createDB(db, 3, 3)
	}
	states := func() map[string]models.ShardStates {
		out := map[string]models.ShardStates{}
		for _, db := range dbs {
			out[db] = h.etcdStates(db)
		}
		return out
	}
	before := states()
	require.True(t, leaderOfEach(before, "n1"), "per-database spread: n1 leads a shard of each database")

	h.kill("n1")
	h.eventually("n1's shards re-led", func(st *statemachine.State) bool {
		for _, db := range dbs {
			if !noneLedBy(st.ShardStates.At(db), "n1") {
				return false
			}
		}
		return true
	})
	ctx := context.Background()
	h.sameTxn(dbs...)
	// The release follows the wait for the local state that the wait
	// above saw too: it may come a moment later.
	require.Eventually(t, func() bool {
		locks, _, err := h.store.List(ctx, h.keys.NS+"/failover/")
		require.NoError(t, err)
		return len(locks) == 0
	}, 5*time.Second, 10*time.Millisecond, "failover locks released")

	// b's states change in etcd while the master's copy of them lags.
	mid := states()
	victim := "n2"
	require.True(t, leaderOfEach(mid, victim))
	stale.hold()
	kvp, err := h.store.Get(ctx, h.keys.ShardState("b"))
	require.NoError(t, err)
	_, err = h.store.Put(ctx, h.keys.ShardState("b"), kvp.Value, 0)
	require.NoError(t, err)
	h.kill(victim)
	h.eventually("a and c re-led while b's publication is refused", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("a"), victim) && noneLedBy(st.ShardStates.At("c"), victim)
	})
	require.False(t, noneLedBy(h.etcdStates("b"), victim), "b's stale batch entry was refused")
	h.sameTxn("a", "c")
	stale.release()
	h.eventually("b re-led once its states are read again", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("b"), victim)
	})
	after := states()
	for _, db := range dbs {
		for i, s := range after[db].Shards {
			prev := mid[db].Shards[i]
			if prev.Leader != victim {
				require.Equal(t, prev, s, "%s/%d was not led by %s", db, s.ID, victim)
				continue
			}
			require.Equal(t, prev.Term+1, s.Term, "%s/%d: one new term", db, s.ID)
			require.Equal(t, "n3", s.Leader, "%s/%d: the one live replica leads", db, s.ID)
		}
	}
}

// TestFailoverLockHeldHoldsUpItsDatabaseOnly: b's failover lock, held by
// another orchestrator, refuses the batch; a and c are still published, b
// once the lock is gone.
func TestFailoverLockHeldHoldsUpItsDatabaseOnly(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	dbs := []string{"a", "b", "c"}
	for _, db := range dbs {
		h.createDB(db, 3, 3)
	}
	ctx := context.Background()
	require.False(t, noneLedBy(h.etcdStates("b"), "n1"), "n1 leads a shard of b")
	lock := h.keys.FailoverLock("b")
	_, err := h.store.Put(ctx, lock, []byte("another/1/1"), 0)
	require.NoError(t, err)
	h.kill("n1")
	h.eventually("a and c re-led while b's lock is held", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("a"), "n1") && noneLedBy(st.ShardStates.At("c"), "n1")
	})
	require.False(t, noneLedBy(h.etcdStates("b"), "n1"), "b waits for the lock")
	_, err = h.store.Delete(ctx, lock)
	require.NoError(t, err)
	h.eventually("b re-led once the lock is gone", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("b"), "n1")
	})
}

// The failover locks of a publication are released once etcd applied it,
// while the master waits for its local state to show it, not after: with
// the master's copy of the shard states held back, n1's shards are
// published under new leaders and their locks are gone before the master
// sees its own write (its wait gives up after 5 s; the locks went only
// then).
func TestFailoverLocksReleasedWhileTheStateCatchesUp(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	lag := &laggingState{sm: h.sm}
	h.startMaster(masterOpts{state: lag.State})
	h.createDB("a", 6, 3)
	ctx := context.Background()
	lag.hold()
	defer lag.release()
	h.kill("n1")
	require.Eventually(t, func() bool {
		if !noneLedBy(h.etcdStates("a"), "n1") {
			return false
		}
		locks, _, err := h.store.List(ctx, h.keys.NS+"/failover/")
		require.NoError(t, err)
		return len(locks) == 0
	}, 3*time.Second, 10*time.Millisecond, "n1's shards published and their locks released while the state lags")
	require.False(t, noneLedBy(lag.State().ShardStates.At("a"), "n1"), "the master's state still lags")
}

// A publication batch takes its failover locks in the txn that publishes
// its states, one per database: n1 leads two shards of each of three
// databases, and three locks, one per database, are put at the revision
// the databases' new states were published at. A lock per shard put six.
func TestFailoverLocksTakenInThePublishingTxn(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	dbs := []string{"a", "b", "c"}
	for _, db := range dbs {
		h.createDB(db, 6, 3)
		led := 0
		for _, s := range h.etcdStates(db).Shards {
			if s.Leader == "n1" {
				led++
			}
		}
		require.Equal(t, 2, led, "n1 leads two shards of %s", db)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, rev, err := h.store.Header(ctx)
	require.NoError(t, err)
	locks := h.store.Watch(ctx, h.keys.NS+"/failover/", rev+1)
	h.kill("n1")
	h.eventually("n1's shards re-led", func(st *statemachine.State) bool {
		for _, db := range dbs {
			if !noneLedBy(st.ShardStates.At(db), "n1") {
				return false
			}
		}
		return true
	})
	h.sameTxn(dbs...)
	kvp, err := h.store.Get(ctx, h.keys.ShardState("a"))
	require.NoError(t, err)
	puts := map[string]int64{}
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-locks:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					if _, seen := puts[ev.KV.Key]; ev.Type == kv.EventPut && !seen {
						// The first put: the failover's. A later pass
						// may take a lock again (a CI run saw c's
						// again 2 revisions later).
						puts[ev.KV.Key] = ev.KV.ModRev
					}
				}
			default:
				return len(puts) >= len(dbs)
			}
		}
	}, 5*time.Second, 10*time.Millisecond, "the locks taken")
	// A txn's events come in one watch answer: every lock it put is here.
	require.Len(t, puts, len(dbs), "one lock per database")
	for _, db := range dbs {
		require.Equal(t, kvp.ModRev, puts[h.keys.FailoverLock(db)], "%s's lock taken in the publishing txn", db)
	}
}
