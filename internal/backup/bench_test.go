package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// bigNamespace is 10,000 databases of 16 shards, replica factor 3, on 30
// nodes: a database config, an assignment and a shard state per database,
// encoded as the real records are.
func bigNamespace(b *testing.B, ns string, dbs int) []kvp {
	b.Helper()
	keys := models.Keys{NS: ns}
	node := func(i int) string { return fmt.Sprintf("node-%08x", uint32(i*2654435761)) }
	out := make([]kvp, 0, 3*dbs)
	for d := range dbs {
		name := fmt.Sprintf("metrics_tenant_%05d", d)
		cfg := models.Database{Name: name, StorageCluster: "default", NumShards: 16, ReplicaFactor: 3,
			Options: map[string]any{"retention": "30d", "interval": "10s", "auto_create_ns": true}}
		as := models.Assignment{DB: name, Cluster: "default"}
		st := models.ShardStates{DB: name}
		for s := range 16 {
			r := []string{node((d + s) % 30), node((d + s + 1) % 30), node((d + s + 2) % 30)}
			as.Shards = append(as.Shards, models.ShardAssignment{ID: s, Replicas: r})
			st.Shards = append(st.Shards, models.ShardState{ID: s, Leader: r[0], Term: int64(1000 + d + s), Status: models.StatusOnline})
		}
		for key, v := range map[string]any{keys.DatabaseConfig(name): cfg, keys.Assign(name): as, keys.ShardState(name): st} {
			data, err := json.Marshal(v)
			require.NoError(b, err)
			out = append(out, kvp{key: key, value: data})
		}
	}
	return out
}

// BenchmarkBackupRestore10k backs up 30,000 keys from one embedded etcd and
// restores them into another. Run with -benchtime=1x: each iteration is seconds.
func BenchmarkBackupRestore10k(b *testing.B) {
	ctx := context.Background()
	src := etcdtest.Start(b).Store(b)
	dst := etcdtest.Start(b).Store(b)
	kvs := bigNamespace(b, "/cairn", 10000)
	seedOpts := Options{Store: src, Namespace: "/cairn"}
	require.NoError(b, seedOpts.validate())
	_, err := writeAll(ctx, seedOpts, kvs)
	require.NoError(b, err)
	b.ResetTimer()
	var backupDur, restoreDur time.Duration
	var size int64
	for range b.N {
		var buf bytes.Buffer
		start := time.Now()
		s, err := Backup(ctx, Options{Store: src, Namespace: "/cairn"}, &buf)
		require.NoError(b, err)
		backupDur += time.Since(start)
		require.Equal(b, len(kvs), s.Keys)
		size = s.Bytes

		start = time.Now()
		r, err := Restore(ctx, Options{Store: dst, Namespace: "/cairn"}, &buf, true)
		require.NoError(b, err)
		restoreDur += time.Since(start)
		require.Equal(b, len(kvs), r.Keys)
	}
	b.ReportMetric(float64(backupDur.Milliseconds())/float64(b.N), "backup-ms")
	b.ReportMetric(float64(restoreDur.Milliseconds())/float64(b.N), "restore-ms")
	b.ReportMetric(float64(size)/(1<<20), "file-MiB")
	b.ReportMetric(float64(len(kvs)), "keys")
}
