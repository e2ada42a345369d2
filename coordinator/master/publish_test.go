package master_test

import (
	"context"
	"fmt"
	"strings"
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

// TestFailoverLockHeldHoldsUpItsDatabaseOnly: a failover lock another
// orchestrator holds on a shard of b refuses the batch; a and c are still
// published, b once the lock is gone.
func TestFailoverLockHeldHoldsUpItsDatabaseOnly(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	dbs := []string{"a", "b", "c"}
	for _, db := range dbs {
		h.createDB(db, 3, 3)
	}
	ctx := context.Background()
	var lock string
	for _, s := range h.etcdStates("b").Shards {
		if s.Leader == "n1" {
			lock = h.keys.FailoverLock("b", s.ID)
		}
	}
	require.NotEmpty(t, lock, "n1 leads a shard of b")
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
// its states: the locks of n1's shards are put at the revision the three
// databases' new states were published at, one round trip where the locks
// took one of their own before.
func TestFailoverLocksTakenInThePublishingTxn(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	dbs := []string{"a", "b", "c"}
	for _, db := range dbs {
		h.createDB(db, 3, 3)
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
	var puts []int64
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-locks:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					if ev.Type == kv.EventPut {
						puts = append(puts, ev.KV.ModRev)
					}
				}
			default:
				return len(puts) >= 3
			}
		}
	}, 5*time.Second, 10*time.Millisecond, "a lock per shard n1 led (one in each database at least)")
	for _, r := range puts {
		require.Equal(t, kvp.ModRev, r, "a lock taken in the publishing txn")
	}
}

// A publication's failover locks are released once its last batch is
// published, not batch by batch: a release is a txn as big as a batch's,
// and etcd applies one txn at a time, so releases sent as each batch went
// through delayed the batches still to come (a domain's failover at 1,000
// nodes is ~100 of each). n1 leads a third of the shards of 20 databases,
// each a batch of its own (more than the 16 writers): every lock of theirs
// is deleted at a revision above every new state's.
func TestFailoverLocksReleasedAfterTheLastBatch(t *testing.T) {
	const dbs, shards = 20, 192 // n1 leads 64 of each: a database per batch
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	names := make([]string, dbs)
	for i := range names {
		names[i] = fmt.Sprintf("d%02d", i)
		h.createDB(names[i], shards, 3)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, rev, err := h.store.Header(ctx)
	require.NoError(t, err)
	events := h.store.Watch(ctx, h.keys.NS+"/", rev+1)
	h.kill("n1")
	var lastState, firstDelete, deletes int64
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-events:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					switch {
					case ev.Type == kv.EventPut && strings.HasPrefix(ev.KV.Key, h.keys.ShardStatePrefix()):
						lastState = max(lastState, ev.KV.ModRev)
					case ev.Type == kv.EventDelete && strings.HasPrefix(ev.KV.Key, h.keys.NS+"/failover/"):
						if firstDelete == 0 {
							firstDelete = ev.KV.ModRev
						}
						deletes++
					}
				}
			default:
				return deletes == dbs*shards/3
			}
		}
	}, 30*time.Second, 10*time.Millisecond, "every lock of n1's shards released")
	require.Greater(t, firstDelete, lastState, "the first lock released after the last batch published")
}
