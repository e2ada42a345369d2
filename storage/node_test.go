package storage_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// An idle storage node writes its record once: being looked at again (every
// MinRewrite) rewrites nothing while the content is the same; a real change (a followed leader) is written once, with
// last_updated moved to the time of that change. Against a real etcd, so the
// revisions counted are etcd's.
func TestNodeRecordWrittenOnlyOnChange(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ck := models.ClusterKeys{SNS: "/t/storage/default"}

	var mu sync.Mutex
	following := map[string]string{"d/0": "L"}
	var looks atomic.Int64
	report := func() (int, map[string]string) {
		looks.Add(1)
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for k, v := range following {
			out[k] = v
		}
		return len(out), out
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	registered := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- storage.RunNode(ctx, storage.NodeConfig{Store: store, Keys: ck, NodeID: "n1", Address: "127.0.0.1:1", Cluster: "default",
			TTL: 2 * time.Second, MinRewrite: 5 * time.Millisecond, Report: report, Logger: zap.NewNop(), Now: now,
			Registered: func() { registered <- struct{}{} }})
	}()
	<-registered
	read := func() (models.StorageNode, *kv.KeyValue) {
		kvp, err := store.Get(ctx, ck.Node("n1"))
		require.NoError(t, err)
		require.NotNil(t, kvp)
		var rec models.StorageNode
		require.NoError(t, json.Unmarshal(kvp.Value, &rec))
		return rec, kvp
	}
	first, kvp := read()
	require.Equal(t, map[string]string{"d/0": "L"}, first.Following)
	require.Equal(t, 1, first.Hosted)
	require.Equal(t, models.ProtocolVersion, first.Protocol, "the record advertises the protocol the node speaks")
	require.Equal(t, clock.Load(), first.LastUpdated)
	require.Empty(t, first.LastTxnID, "last txn ids are asked for at failover, not kept in etcd")

	// Nothing changed: looked at again and again, never rewritten.
	clock.Add(int64(time.Minute / time.Microsecond))
	want := looks.Load() + 5
	require.Eventually(t, func() bool { return looks.Load() >= want }, 10*time.Second, 2*time.Millisecond)
	again, kv2 := read()
	require.Equal(t, kvp.ModRev, kv2.ModRev, "an unchanged record is not rewritten")
	require.Equal(t, first.LastUpdated, again.LastUpdated)

	// A followed shard changes leader: one rewrite, last_updated = then.
	mu.Lock()
	following["d/0"] = "M"
	mu.Unlock()
	require.Eventually(t, func() bool {
		rec, _ := read()
		return rec.Following["d/0"] == "M"
	}, 10*time.Second, 5*time.Millisecond)
	rec, kv3 := read()
	require.Greater(t, kv3.ModRev, kv2.ModRev)
	require.Equal(t, clock.Load(), rec.LastUpdated, "last_updated is the time of the last real change")
	cancel()
	require.NoError(t, <-done)
}
