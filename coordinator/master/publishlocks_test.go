package master

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// publisher is a master over a real embedded etcd whose txns are counted,
// publishing from an empty state (every database's states are new) that
// its local state shows at once (awaitRev returns).
type publisher struct {
	m     *Master
	store *txnCounter
	keys  models.Keys
	st    *statemachine.State
}

func newPublisher(t *testing.T) *publisher {
	ctx := context.Background()
	store := &txnCounter{EtcdStore: etcdtest.Start(t).Store(t)}
	keys := models.Keys{NS: "/cairn"}
	session, err := kv.NewSession(ctx, store.EtcdStore, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close(context.Background()) })
	el := kv.NewElection(store, keys.Master())
	term, err := el.Campaign(ctx, session, []byte(`{"node_id":"m"}`))
	require.NoError(t, err)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(ctx)
	t.Cleanup(sm.Stop)
	st := sm.Snapshot()
	shown := *st
	shown.Revisions = map[string]int64{statemachine.SourceShardState: math.MaxInt64}
	m := New(Config{Store: store, Keys: keys, Election: el, Term: term, Session: session, NodeID: "m",
		State: func() *statemachine.State { return &shown }, Changed: sm.Changed})
	store.txns.Store(0)
	return &publisher{m: m, store: store, keys: keys, st: st}
}

// domainUpdates is the shape of a dead domain's failover: dbs databases of
// shards shards, every third one with a new leader.
func domainUpdates(dbs, shards int) []statesUpdate {
	ups := make([]statesUpdate, dbs)
	for i := range ups {
		db := fmt.Sprintf("db%04d", i)
		next := models.ShardStates{DB: db}
		var changed []int
		for s := range shards {
			next.Shards = append(next.Shards, models.ShardState{ID: s, Leader: fmt.Sprintf("node-%04d", (i+s)%1000), Term: 2, Status: models.StatusOnline})
			if s%3 == 0 {
				changed = append(changed, s)
			}
		}
		ups[i] = statesUpdate{db: db, next: next, changed: changed}
	}
	return ups
}

// A whole domain's failover takes one failover lock per database, in the
// txn that publishes the database's states: 200 databases of 32 shards with
// 11 new leaders each are published in 4 txns of 50 databases and their
// 200 locks released in 4 more. A lock per shard took 2,200 locks, 25
// publishing txns of 8 databases and 22 release txns.
func TestDomainPublicationTakesALockPerDatabase(t *testing.T) {
	p := newPublisher(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, rev, err := p.store.Header(ctx)
	require.NoError(t, err)
	events := p.store.Watch(ctx, p.keys.NS+"/failover/", rev+1)

	ups := domainUpdates(200, 32)
	require.Empty(t, p.m.publishBatch(ctx, p.st, ups))
	kvs, _, err := p.store.List(ctx, p.keys.ShardStatePrefix())
	require.NoError(t, err)
	require.Len(t, kvs, len(ups), "every database published")
	require.Equal(t, int64(8), p.store.txns.Load(), "4 publishing txns and 4 releases")

	puts, deletes := map[string]bool{}, 0
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-events:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					if ev.Type == kv.EventPut {
						puts[ev.KV.Key] = true
					} else {
						deletes++
					}
				}
			default:
				return deletes >= len(ups)
			}
		}
	}, 5*time.Second, 10*time.Millisecond, "every lock released")
	require.Len(t, puts, len(ups), "one lock per database")
	for _, u := range ups {
		require.True(t, puts[p.keys.FailoverLock(u.db)], "%s's lock", u.db)
	}
	locks, _, err := p.store.List(ctx, p.keys.NS+"/failover/")
	require.NoError(t, err)
	require.Empty(t, locks)
}

// A publication's batches stay under etcd's request size limit (1.5 MiB by
// default), not only under its operation limit: 40 databases of 1,024
// shards (~70 KiB of states each) with one new leader each are published,
// in batches of under 1 MiB. Cut on operations alone they were one txn of
// ~3 MiB, which etcd refuses: none of them was published.
func TestPublicationBatchesFitEtcdsRequestSize(t *testing.T) {
	p := newPublisher(t)
	ctx := context.Background()
	ups := domainUpdates(40, 1024)
	for i := range ups {
		ups[i].changed = ups[i].changed[:1]
		ups[i].value = mustJSON(ups[i].next)
	}
	batches := txnBatches(ups)
	require.Greater(t, len(batches), 2)
	for _, b := range batches {
		size := 0
		for _, u := range b {
			size += updateBytes(u)
		}
		require.LessOrEqual(t, size, maxTxnBytes)
	}
	for i := range ups {
		ups[i].value = nil // publishBatch encodes them
	}
	require.Empty(t, p.m.publishBatch(ctx, p.st, ups))
	kvs, _, err := p.store.List(ctx, p.keys.ShardStatePrefix())
	require.NoError(t, err)
	require.Len(t, kvs, len(ups), "every database published")
}

// A publication's failover locks are released once its last batch is
// published, not batch by batch: a release is a txn as big as a batch's,
// and etcd applies one txn at a time, so releases sent as each batch went
// through delayed the batches still to come. 20 databases, each a batch of
// its own (more than the 16 writers; 98 operator records each fill its
// txn): every lock is deleted at a revision above every new state's.
func TestFailoverLocksReleasedAfterTheLastBatch(t *testing.T) {
	p := newPublisher(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := publishWriters + 4
	ups := domainUpdates(n, 3)
	for i := range ups {
		for s := range maxTxnOps - 2 {
			ups[i].extra = append(ups[i].extra, kv.OpPut(p.keys.Operator(ups[i].db, s), []byte(`{}`), 0))
		}
	}
	require.Len(t, txnBatches(ups), n)
	_, rev, err := p.store.Header(ctx)
	require.NoError(t, err)
	events := p.store.Watch(ctx, p.keys.NS+"/", rev+1)
	require.Empty(t, p.m.publishBatch(ctx, p.st, ups))
	var lastState, firstDelete, deletes int64
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-events:
				require.NoError(t, r.Err)
				for _, ev := range r.Events {
					switch {
					case ev.Type == kv.EventPut && strings.HasPrefix(ev.KV.Key, p.keys.ShardStatePrefix()):
						lastState = max(lastState, ev.KV.ModRev)
					case ev.Type == kv.EventDelete && strings.HasPrefix(ev.KV.Key, p.keys.NS+"/failover/"):
						if firstDelete == 0 {
							firstDelete = ev.KV.ModRev
						}
						deletes++
					}
				}
			default:
				return deletes == int64(n)
			}
		}
	}, 10*time.Second, 10*time.Millisecond, "every lock released")
	require.Greater(t, firstDelete, lastState, "the first lock released after the last batch published")
}
