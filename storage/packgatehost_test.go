package storage_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestHostGatesPacks: a host lets its replica write packs (file format 3)
// only once every replica's record advertises ProtocolPacks: while its own
// record says protocol 3 (an older release), its flushes keep format 2.
func TestHostGatesPacks(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	n := startNode(t, "L", sm, store, engine.WithFlushPoints(5))
	record := func(proto int) {
		sm.Push(statemachine.Event{Source: "nodes/default", Kind: statemachine.KindStorageNodes, Cluster: "default",
			Type: kv.WatchPut, Name: "L", Value: models.StorageNode{NodeID: "L", NodeAddress: n.addr(), Protocol: proto}})
	}
	assign := func() { // a new record: the host looks at the shard again
		put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d",
			models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L"}}}})
	}
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	record(models.ProtocolPacks - 1)
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1, UID: "u1"})
	assign()
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}})
	ctx := context.Background()
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 1, manySeries(0)) == nil }, 5*time.Second, 10*time.Millisecond)
	s, err := n.eng.Open("d", 0)
	require.NoError(t, err)
	require.NoError(t, s.(engine.FlushWaiter).WaitFlush())
	f, err := s.(engine.PackWriter).Format()
	require.NoError(t, err)
	require.EqualValues(t, 2, f, "no pack while a replica speaks protocol 3")

	record(models.ProtocolPacks)
	assign()
	require.Eventually(t, func() bool {
		require.NoError(t, n.host.Write(ctx, "d", 0, 1, manySeries(1)))
		require.NoError(t, s.(engine.FlushWaiter).WaitFlush())
		f, err := s.(engine.PackWriter).Format()
		require.NoError(t, err)
		return f == 3
	}, 5*time.Second, 10*time.Millisecond)
	got, err := s.Query("cpu", nil, 0, 1<<40)
	require.NoError(t, err)
	require.Len(t, got, 10)

	// A follower of 0.1.0 names no protocol: it gets no snapshot of a file
	// that holds packs (it would restore it without them); this release's
	// does.
	snapshot := func(query string) (int, string) {
		resp, err := http.Get("http://" + n.addr() + "/internal/v1/shards/d/0/snapshot?term=1" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := snapshot("")
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "is format 3, the peer reads format 2 and older: upgrade the peer")
	code, body = snapshot(fmt.Sprintf("&protocol=%d", models.ProtocolPacks-1))
	require.Equal(t, http.StatusConflict, code, body)
	code, body = snapshot(fmt.Sprintf("&protocol=%d", models.ProtocolVersion))
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "CAIRNSNP"), "a snapshot")
}

// manySeries is a point of each of 10 series at ts.
func manySeries(ts int64) []lineproto.Point {
	out := make([]lineproto.Point, 10)
	for i := range out {
		out[i] = lineproto.Point{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: fmt.Sprint(i)}}, Field: "value", Value: 1, TS: ts}
	}
	return out
}
