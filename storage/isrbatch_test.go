package storage

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// heldStore counts the txns that put in-sync sets and, while hold is set,
// keeps the first of them waiting until release is closed; the one
// numbered stallAt (from 1, over every such txn; 0: none) waits until
// stall is closed.
type heldStore struct {
	*kv.EtcdStore
	hold    atomic.Bool
	release chan struct{}
	once    sync.Once
	freed   sync.Once
	stallAt atomic.Int64
	stall   chan struct{}
	failISR atomic.Bool // in-sync set txns fail (etcd timing out)
	mu      sync.Mutex
	isrTxns [][]string // the in-sync keys each txn put
}

func (s *heldStore) Txn(ctx context.Context, cmps []kv.Cmp, ops []kv.Op) (bool, int64, error) {
	var keys []string
	for _, op := range ops {
		if strings.Contains(op.Key, "/isr/") {
			keys = append(keys, op.Key)
		}
	}
	if len(keys) > 0 && s.failISR.Load() {
		return false, 0, kv.ErrUnavailable
	}
	if len(keys) > 0 {
		s.mu.Lock()
		s.isrTxns = append(s.isrTxns, keys)
		n := int64(len(s.isrTxns))
		s.mu.Unlock()
		if s.hold.Load() {
			s.once.Do(func() { <-s.release })
		}
		if n == s.stallAt.Load() {
			<-s.stall
		}
	}
	return s.EtcdStore.Txn(ctx, cmps, ops)
}

// free lets the held txn go (once).
func (s *heldStore) free() { s.freed.Do(func() { close(s.release) }) }

// unstall lets the stalled txn go.
func (s *heldStore) unstall() {
	select {
	case <-s.stall:
	default:
		close(s.stall)
	}
}

func (s *heldStore) txns() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.isrTxns...)
}

// batchHost is a host L of one database d of n shards on a real etcd, with
// live records for L and F, for the in-sync batch tests.
type batchHost struct {
	t      *testing.T
	ctx    context.Context
	h      *Host
	sm     *statemachine.Manager
	store  *heldStore
	keys   models.Keys
	ck     models.ClusterKeys
	shards int
}

func startBatchHost(t *testing.T, shards int) *batchHost {
	const ns = "/t"
	ctx := context.Background()
	b := &batchHost{t: t, ctx: ctx, keys: models.Keys{NS: ns}, ck: models.ClusterKeys{SNS: ns + "/storage/default"}, shards: shards,
		store: &heldStore{EtcdStore: etcdtest.Start(t).Store(t), release: make(chan struct{}), stall: make(chan struct{})}}
	b.sm = statemachine.New(statemachine.Config{})
	b.sm.Start(ctx)
	t.Cleanup(b.sm.Stop)
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	b.h = NewHost(HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: b.store, Keys: b.ck,
		State: b.sm.Snapshot, Changed: b.sm.Changed, Logger: zap.NewNop(), LagBound: time.Hour, DropDelay: time.Hour,
		StateStore: b.store, StateKeys: b.keys})
	_, err = b.store.Put(ctx, b.ck.Node("L"), []byte(`{"node_id":"L","node_address":"127.0.0.1:1"}`), 0)
	require.NoError(t, err)
	rec, err := b.store.Get(ctx, b.ck.Node("L"))
	require.NoError(t, err)
	b.h.SetRecordRev(rec.CreateRev)
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.h.Run(hctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = eng.Close() })
	t.Cleanup(b.store.free) // first: a failed test leaves no txn held
	t.Cleanup(func() { b.store.stallAt.Store(0); b.store.unstall() })

	nodes := statemachine.ClusterNodesSource("default")
	for _, n := range []string{"L", "F"} {
		b.push(nodes, statemachine.KindStorageNodes, n, models.StorageNode{NodeID: n, NodeAddress: "127.0.0.1:1"})
	}
	b.sm.Push(statemachine.Event{Source: nodes, Type: kv.WatchSynced})
	b.push(statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "default", models.StorageCluster{Name: "default"})
	b.push(statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: shards, ReplicaFactor: 2, UID: "u1"})
	return b
}

func (b *batchHost) push(source string, kind statemachine.Kind, name string, v any) {
	b.sm.Push(statemachine.Event{Source: source, Kind: kind, Cluster: "default", Type: kv.WatchPut, Name: name, Value: v})
}

// assign publishes every shard of d assigned to replicas.
func (b *batchHost) assign(replicas ...string) {
	a := models.Assignment{DB: "d", Cluster: "default"}
	for i := range b.shards {
		a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: replicas})
	}
	b.push(statemachine.SourceAssign, statemachine.KindAssign, "d", a)
}

// lead publishes (in etcd and the state) every shard of d led by L at term.
func (b *batchHost) lead(term int64) {
	states := models.ShardStates{DB: "d"}
	for i := range b.shards {
		states.Shards = append(states.Shards, models.ShardState{ID: i, Leader: "L", Term: term, Status: models.StatusOnline})
	}
	raw, _ := json.Marshal(states)
	_, err := b.store.Put(b.ctx, b.keys.ShardState("d"), raw, 0)
	require.NoError(b.t, err)
	b.push(statemachine.SourceShardState, statemachine.KindShardState, "d", states)
}

// set is shard i's in-sync set on record (nil: none).
func (b *batchHost) set(i int) models.ISR {
	kvp, err := b.store.Get(b.ctx, b.ck.ISR("d", i))
	require.NoError(b.t, err)
	var s models.ISR
	if kvp != nil {
		require.NoError(b.t, json.Unmarshal(kvp.Value, &s))
	}
	return s
}

// queued waits until n writes wait in L's batcher.
func (b *batchHost) queued(n int, msg string) {
	require.Eventually(b.t, func() bool {
		b.h.isrBatch.mu.Lock()
		defer b.h.isrBatch.mu.Unlock()
		return len(b.h.isrBatch.pending) == n
	}, 10*time.Second, time.Millisecond, msg)
}

// heldThenQueued waits until the held txn (the first after the first
// `before` in-sync txns) is in the store and every other of the n writes is
// queued behind it, and returns how many writes the held txn carries. The
// caller writing the batches may find several writes queued when it takes
// its first batch (on a loaded machine, all of them): the held txn then
// carries them, and only the rest queue.
func (b *batchHost) heldThenQueued(before, n int, msg string) int {
	held := 0
	require.Eventually(b.t, func() bool {
		txns := b.store.txns()
		if len(txns) != before+1 {
			return false
		}
		held = len(txns[before])
		b.h.isrBatch.mu.Lock()
		defer b.h.isrBatch.mu.Unlock()
		return len(b.h.isrBatch.pending) == n-held
	}, 10*time.Second, time.Millisecond, msg)
	return held
}

// inTwo checks that the in-sync txns after the first `before` are the held
// one of held writes, then (when any were queued) one of the n-held queued
// behind it.
func (b *batchHost) inTwo(before, held, n int) {
	txns := b.store.txns()[before:]
	if held == n {
		require.Len(b.t, txns, 1, "every write in the held txn: %v", txns)
		return
	}
	require.Len(b.t, txns, 2, "the held txn, then one for the writes queued behind it: %v", txns)
	require.Len(b.t, txns[0], held)
	require.Len(b.t, txns[1], n-held)
}

// Leaders of one host that change their in-sync sets at the same time write
// them together: while one write is in flight the others queue, and go in
// one read and one txn, each set fenced as alone (the state's create
// revision, the set's mod revision, the node record). Eight shards led by L
// lose follower F from their assignment at once: the first batch (one
// write, unless the others came before its writer took it) is held in the
// store until the others are queued behind it, those go in one txn, and
// every set on record is {L}.
func TestISRWritesOfOneHostGoTogether(t *testing.T) {
	const shards = 8
	b := startBatchHost(t, shards)
	b.assign("L", "F")
	b.lead(1)
	require.Eventually(t, func() bool {
		for i := range shards {
			if len(b.set(i).Replicas) != 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every leadership recorded its first set {L, F}")
	before := len(b.store.txns())

	b.store.hold.Store(true)
	b.assign("L")
	held := b.heldThenQueued(before, shards, "the first write held, the others queued behind it")
	b.store.free()
	require.Eventually(t, func() bool {
		for i := range shards {
			if s := b.set(i).Replicas; len(s) != 1 || s[0] != "L" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every set shrunk to {L}")
	b.inTwo(before, held, shards)
}

// A node that becomes leader of many shards at once (a domain died: the
// master re-elects its shards over the survivors) writes their first
// in-sync sets through the same batcher: L becomes leader of eight shards
// at term 2 at once; the first batch is held until the others queue behind
// it, and those go in one read and one txn, each from
// the set on record (F, on record and live, stays in; D, dead, is left
// out), fenced as alone. Before, each new leadership read and wrote its own:
// eight txns.
func TestFirstISRsOfOneHostGoTogether(t *testing.T) {
	const shards = 8
	b := startBatchHost(t, shards)
	for i := range shards {
		raw, _ := json.Marshal(models.ISR{Leader: "D", Term: 1, Replicas: []string{"D", "L", "F"}})
		_, err := b.store.Put(b.ctx, b.ck.ISR("d", i), raw, 0)
		require.NoError(t, err)
	}
	b.assign("D", "L", "F")
	b.store.hold.Store(true)
	b.lead(2)
	held := b.heldThenQueued(0, shards, "the first write held, the others queued behind it")
	b.store.free()
	require.Eventually(t, func() bool {
		for i := range shards {
			if s := b.set(i); s.Term != 2 || s.Leader != "L" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every new leadership recorded its first set")
	for i := range shards {
		require.ElementsMatch(t, []string{"L", "F"}, b.set(i).Replicas, "shard %d", i)
	}
	b.inTwo(0, held, shards)
}

// A batch is written for every write queued in it, not under the context
// of the caller that happens to write the batches: L's leaderships of
// shards 0 and 1 drop F at once; the write of shard 0 goes first (held in
// the store) and its caller's context ends while shard 1's waits behind
// it. Shard 1's set is written all the same. Before, the batch went under
// the ended context and shard 1's write failed with it.
func TestISRBatchOutlivesTheCallerWritingIt(t *testing.T) {
	const shards = 2
	b := startBatchHost(t, shards)
	r0, r1 := b.twoLeaderships()

	before := len(b.store.txns())
	b.store.hold.Store(true)
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	errs := make(chan error, 2)
	go func() { errs <- r0.persistISRBatched(ctx0, 1, []string{"L"}) }()
	require.Eventually(t, func() bool { return len(b.store.txns()) > before },
		10*time.Second, time.Millisecond, "shard 0's write is in flight")
	go func() { errs <- r1.persistISRBatched(context.Background(), 1, []string{"L"}) }()
	b.queued(1, "shard 1's write queued behind shard 0's")
	cancel0()
	b.store.free()
	var failed []error
	for range 2 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	require.LessOrEqual(t, len(failed), 1, "at most shard 0's own write fails with its context: %v", failed)
	s := b.set(1)
	require.Equal(t, []string{"L"}, s.Replicas, "shard 1's set written though the caller writing the batches was gone")
}

// twoLeaderships starts b with shards 0 and 1 led by L with follower F,
// waits for their first sets, and returns their replicas.
func (b *batchHost) twoLeaderships() (*replica, *replica) {
	rs := b.leaderships(2)
	return rs[0], rs[1]
}

// leaderships starts b with shards 0..n-1 led by L with follower F, waits
// for their first sets {L, F}, and returns their replicas.
func (b *batchHost) leaderships(n int) []*replica {
	b.assign("L", "F")
	b.lead(1)
	require.Eventually(b.t, func() bool {
		for i := range n {
			if len(b.set(i).Replicas) != 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every leadership recorded its first set {L, F}")
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = b.h.get("d", i)
		require.NotNil(b.t, rs[i])
	}
	return rs
}

// heldWrite sends r's write of the set {L} and returns once its txn is
// held in the store, with the in-sync txns before it and its outcome.
func (b *batchHost) heldWrite(r *replica) (int, <-chan error) {
	before := len(b.store.txns())
	b.store.hold.Store(true)
	first := make(chan error, 1)
	go func() { first <- r.persistISRBatched(context.Background(), 1, []string{"L"}) }()
	require.Eventually(b.t, func() bool { return len(b.store.txns()) > before },
		10*time.Second, time.Millisecond, "shard 0's write is in flight")
	return before, first
}

// A write whose caller is gone leaves the queue at once, without waiting
// for the batch in flight ahead of it: a role's end waits for its steps,
// and a host changes its replicas' roles one after the other, so a
// leadership ending behind a host's queued writes held up every other
// shard of the host (at 300 nodes, a domain's new leaders took minutes to
// write their first sets). Shard 0's write is in flight (held in the
// store); shard 1's caller, queued behind it, is cancelled and returns
// while shard 0's txn is still held. Before, it waited for that txn.
func TestISRWriteOfAGoneCallerLeavesTheQueue(t *testing.T) {
	b := startBatchHost(t, 2)
	r0, r1 := b.twoLeaderships()
	_, first := b.heldWrite(r0)
	ctx1, cancel1 := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() { queued <- r1.persistISRBatched(ctx1, 1, []string{"L"}) }()
	b.queued(1, "shard 1's write queued behind shard 0's")
	cancel1()
	var err error
	require.Eventually(t, func() bool {
		select {
		case err = <-queued:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "the cancelled caller returned while shard 0's txn is in flight")
	require.ErrorIs(t, err, context.Canceled)
	b.store.free()
	require.NoError(t, <-first)
	require.Equal(t, []string{"L"}, b.set(0).Replicas)
	require.Len(t, b.set(1).Replicas, 2, "shard 1's withdrawn write was not sent")
}

// The caller writing a host's batches returns once its own write is
// decided and hands the turn to a queued caller: shard 0's write is in
// flight, shard 1's queued behind it; once shard 0's txn is through, its
// caller returns while shard 1's batch (written by shard 1's caller now)
// is still stalled in the store. Before, shard 0's caller wrote every
// batch queued behind its own, so its role could not end before them.
func TestISRWriterHandsItsTurnOn(t *testing.T) {
	b := startBatchHost(t, 2)
	r0, r1 := b.twoLeaderships()
	before, first := b.heldWrite(r0)
	second := make(chan error, 1)
	go func() { second <- r1.persistISRBatched(context.Background(), 1, []string{"L"}) }()
	b.queued(1, "shard 1's write queued behind shard 0's")
	b.store.stallAt.Store(int64(before + 2))
	b.store.free()
	var err error
	require.Eventually(t, func() bool {
		select {
		case err = <-first:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "shard 0's caller returned while shard 1's batch is stalled")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(b.store.txns()) == before+2 },
		10*time.Second, time.Millisecond, "shard 1's batch is sent (and stalled)")
	select {
	case err := <-second:
		t.Fatalf("shard 1's write returned while its txn is stalled: %v", err)
	default:
	}
	b.store.unstall()
	require.NoError(t, <-second)
	require.Equal(t, []string{"L"}, b.set(1).Replicas)
}
