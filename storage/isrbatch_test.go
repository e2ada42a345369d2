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
// keeps the first of them waiting until release is closed.
type heldStore struct {
	*kv.EtcdStore
	hold    atomic.Bool
	release chan struct{}
	once    sync.Once
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
	if len(keys) > 0 {
		s.mu.Lock()
		s.isrTxns = append(s.isrTxns, keys)
		s.mu.Unlock()
		if s.hold.Load() {
			s.once.Do(func() { <-s.release })
		}
	}
	return s.EtcdStore.Txn(ctx, cmps, ops)
}

func (s *heldStore) txns() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.isrTxns...)
}

// Leaders of one host that change their in-sync sets at the same time write
// them together: while one write is in flight the others queue, and go in
// one read and one txn, each set fenced as alone (the state's create
// revision, the set's mod revision, the node record). Eight shards led by L
// lose follower F from their assignment at once: the first write goes alone
// (held in the store until the seven others are queued behind it), the
// seven others in one txn, and every set on record is {L}.
func TestISRWritesOfOneHostGoTogether(t *testing.T) {
	const (
		ns     = "/t"
		shards = 8
	)
	ctx := context.Background()
	keys := models.Keys{NS: ns}
	ck := models.ClusterKeys{SNS: ns + "/storage/default"}
	store := &heldStore{EtcdStore: etcdtest.Start(t).Store(t), release: make(chan struct{})}
	sm := statemachine.New(statemachine.Config{})
	sm.Start(ctx)
	defer sm.Stop()
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	h := NewHost(HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store, Keys: ck,
		State: sm.Snapshot, Changed: sm.Changed, Logger: zap.NewNop(), LagBound: time.Hour, DropDelay: time.Hour,
		StateStore: store, StateKeys: keys})
	_, err = store.Put(ctx, ck.Node("L"), []byte(`{"node_id":"L","node_address":"127.0.0.1:1"}`), 0)
	require.NoError(t, err)
	rec, err := store.Get(ctx, ck.Node("L"))
	require.NoError(t, err)
	h.SetRecordRev(rec.CreateRev)
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.Run(hctx) }()
	defer func() { cancel(); <-done; _ = eng.Close() }()

	push := func(source string, kind statemachine.Kind, name string, v any) {
		sm.Push(statemachine.Event{Source: source, Kind: kind, Cluster: "default", Type: kv.WatchPut, Name: name, Value: v})
	}
	nodes := statemachine.ClusterNodesSource("default")
	for _, n := range []string{"L", "F"} {
		push(nodes, statemachine.KindStorageNodes, n, models.StorageNode{NodeID: n, NodeAddress: "127.0.0.1:1"})
	}
	sm.Push(statemachine.Event{Source: nodes, Type: kv.WatchSynced})
	states := models.ShardStates{DB: "d"}
	assign := func(replicas ...string) models.Assignment {
		a := models.Assignment{DB: "d", Cluster: "default"}
		for i := range shards {
			a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: replicas})
		}
		return a
	}
	for i := range shards {
		states.Shards = append(states.Shards, models.ShardState{ID: i, Leader: "L", Term: 1, Status: models.StatusOnline})
	}
	raw, _ := json.Marshal(states)
	_, err = store.Put(ctx, keys.ShardState("d"), raw, 0)
	require.NoError(t, err)
	push(statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "default", models.StorageCluster{Name: "default"})
	push(statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: shards, ReplicaFactor: 2, UID: "u1"})
	push(statemachine.SourceAssign, statemachine.KindAssign, "d", assign("L", "F"))
	push(statemachine.SourceShardState, statemachine.KindShardState, "d", states)

	set := func(i int) []string {
		kvp, err := store.Get(ctx, ck.ISR("d", i))
		require.NoError(t, err)
		if kvp == nil {
			return nil
		}
		var s models.ISR
		require.NoError(t, json.Unmarshal(kvp.Value, &s))
		return s.Replicas
	}
	require.Eventually(t, func() bool {
		for i := range shards {
			if len(set(i)) != 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every leadership recorded its first set {L, F}")
	before := len(store.txns())

	store.hold.Store(true)
	push(statemachine.SourceAssign, statemachine.KindAssign, "d", assign("L"))
	require.Eventually(t, func() bool {
		h.isrBatch.mu.Lock()
		defer h.isrBatch.mu.Unlock()
		return len(h.isrBatch.pending) == shards-1
	}, 10*time.Second, time.Millisecond, "seven writes queued behind the first")
	close(store.release)
	require.Eventually(t, func() bool {
		for i := range shards {
			if s := set(i); len(s) != 1 || s[0] != "L" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every set shrunk to {L}")
	txns := store.txns()[before:]
	require.Len(t, txns, 2, "one txn alone, then one for the seven queued: %v", txns)
	require.Len(t, txns[0], 1)
	require.Len(t, txns[1], shards-1)
}
