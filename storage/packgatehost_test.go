package storage_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
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
	n, record, assign := gatedNode(t, models.ProtocolPacks-1, 0, t.TempDir(), 0)
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
	snapshot := func(query string) (int, string) { return askSnapshot(t, n, query) }
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

// TestHostGatesPartitions: a host lets its replica of a database with a
// retention seal time partitions (file format 4) only once every replica's
// record advertises ProtocolPartitions; a follower naming an older protocol
// then gets no snapshot of the sealed shard, one naming it does.
func TestHostGatesPartitions(t *testing.T) {
	n, record, assign := gatedNode(t, models.ProtocolPartitions-1, 2*time.Hour, t.TempDir(), 0)
	ctx := context.Background()
	hour := int64(time.Hour)
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 1, manySeries(0)) == nil }, 5*time.Second, 10*time.Millisecond)
	for h := int64(1); h < 6; h++ {
		require.NoError(t, n.host.Write(ctx, "d", 0, 1, manySeries(h*hour)))
	}
	s, err := n.eng.Open("d", 0)
	require.NoError(t, err)
	require.NoError(t, s.(engine.FlushWaiter).WaitFlush())
	sealed, err := s.(engine.Sealer).Seal(6 * hour)
	require.NoError(t, err)
	require.Zero(t, sealed, "no seal while a replica speaks protocol 4")

	record(models.ProtocolPartitions)
	assign()
	require.Eventually(t, func() bool {
		sealed, err = s.(engine.Sealer).Seal(6 * hour)
		require.NoError(t, err)
		return sealed > 0
	}, 5*time.Second, 10*time.Millisecond)
	got, err := s.Query("cpu", nil, 0, 6*hour)
	require.NoError(t, err)
	require.Len(t, got, 10)
	require.Len(t, got[0].Points, 6)

	snapshot := func(query string) (int, string) { return askSnapshot(t, n, query) }
	code, body := snapshot(fmt.Sprintf("&protocol=%d", models.ProtocolPartitions-1))
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "is format 4, the peer reads format 3 and older: upgrade the peer")
	code, body = snapshot(fmt.Sprintf("&protocol=%d", models.ProtocolPartitions))
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "CAIRNSNP"), "a snapshot")
}

// gatedNode starts a storage node L leading shard 0 of database d (with
// retention; 0: forever) alone, its record advertising protocol proto, its
// expiry passes every expireEvery (0: the host's default) over an engine
// in dir; record advertises another protocol, and assign makes the host
// look at the shard again.
func gatedNode(t *testing.T, proto int, retention time.Duration, dir string, expireEvery time.Duration) (n *node, record func(int), assign func()) {
	store, sm := memState(t)
	eng, err := engine.NewBoltEngine(dir, engine.WithFlushPoints(5))
	require.NoError(t, err)
	cfg := hostConfig("L", "", sm, store, eng)
	cfg.ExpireEvery = expireEvery
	n, _ = runHost(t, cfg)
	record = func(proto int) {
		sm.Push(statemachine.Event{Source: "nodes/default", Kind: statemachine.KindStorageNodes, Cluster: "default",
			Type: kv.WatchPut, Name: "L", Value: models.StorageNode{NodeID: "L", NodeAddress: n.addr(), Protocol: proto}})
	}
	assign = func() {
		put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d",
			models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L"}}}})
	}
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	record(proto)
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1, UID: "u1", Retention: models.Duration(retention)})
	assign()
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 1, Status: models.StatusOnline}}})
	return n, record, assign
}

// TestHostSealsForeverDatabase: the host's expiry pass seals the shard of
// a database kept forever too, in partitions of 7 days (InfluxDB's shard
// group duration for an infinite retention), once every replica speaks
// ProtocolPartitions: the partitions of its points older than two lengths
// go to files of their own (the point 3 hours old stays: no 1 h partition)
// and every point is still answered. While a replica speaks protocol 4,
// nothing is sealed.
func TestHostSealsForeverDatabase(t *testing.T) {
	day := int64(24 * time.Hour)
	ages := []int64{30 * day, 21 * day, 14 * day, 3 * int64(time.Hour)}
	for _, proto := range []int{models.ProtocolPartitions - 1, models.ProtocolPartitions} {
		t.Run(fmt.Sprintf("protocol %d", proto), func(t *testing.T) {
			dir := t.TempDir()
			n, _, _ := gatedNode(t, proto, 0, dir, 10*time.Millisecond)
			ctx := context.Background()
			now := time.Now().UnixNano()
			require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 1, manySeries(now-ages[0])) == nil },
				5*time.Second, 10*time.Millisecond)
			for _, age := range ages[1:] {
				require.NoError(t, n.host.Write(ctx, "d", 0, 1, manySeries(now-age)))
			}
			s, err := n.eng.Open("d", 0)
			require.NoError(t, err)
			require.NoError(t, s.(engine.FlushWaiter).WaitFlush())
			files := func() int {
				m, err := filepath.Glob(filepath.Join(dir, "d", "*.db.p*"))
				require.NoError(t, err)
				return len(m)
			}
			if proto < models.ProtocolPartitions {
				sealed, err := s.(engine.Sealer).Seal(now)
				require.NoError(t, err)
				require.Zero(t, sealed, "no seal while a replica speaks protocol 4")
				require.Zero(t, files())
			} else {
				require.Eventually(t, func() bool { return files() == 3 }, 10*time.Second, 10*time.Millisecond,
					"the 7-day partitions of the points 30, 21 and 14 days old")
				f, err := s.(engine.PackWriter).Format()
				require.NoError(t, err)
				require.EqualValues(t, engine.PartFormat, f)
			}
			got, err := s.Query("cpu", nil, 0, now)
			require.NoError(t, err)
			require.Len(t, got, 10)
			for _, sr := range got {
				require.Len(t, sr.Points, len(ages), sr.Tags)
			}
		})
	}
}

// askSnapshot asks n for a snapshot of shard d/0 at term 1 with query.
func askSnapshot(t *testing.T, n *node, query string) (int, string) {
	resp, err := http.Get("http://" + n.addr() + "/internal/v1/shards/d/0/snapshot?term=1" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}
