package statemachine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// BenchmarkWatchLag measures the time from an etcd put to the applied
// snapshot, with puts paced at 1,000/s against a real embedded etcd. b.N puts.
func BenchmarkWatchLag(b *testing.B) {
	member := etcdtest.Start(b)
	store := member.Store(b)
	k := models.Keys{NS: "/lag"}
	m := statemachine.New(statemachine.Config{QueueSize: 8192})
	m.Start(context.Background())
	defer m.Stop()
	for _, src := range statemachine.MainSources(store, k) {
		m.AddSource(src)
	}
	require.Eventually(b, func() bool { return m.Snapshot().Synced[statemachine.SourceDatabaseConfig] }, 10*time.Second, time.Millisecond)
	n := max(b.N, 1)
	sent := make([]time.Time, n)
	seen := make([]time.Time, n)
	done := make(chan struct{})
	go func() { // observer: notes when each database appears
		defer close(done)
		next := 0
		for next < n {
			ch := m.Changed()
			dbs := m.Snapshot().Databases
			for next < n {
				if _, ok := dbs.Get(fmt.Sprintf("db%d", next)); !ok {
					break
				}
				seen[next] = time.Now()
				next++
			}
			if next < n {
				<-ch
			}
		}
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < n; i++ {
		<-tick.C
		name := fmt.Sprintf("db%d", i)
		sent[i] = time.Now()
		if _, err := store.Put(context.Background(), k.DatabaseConfig(name), mustJSON(b, models.Database{Name: name, NumShards: 1}), 0); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.StopTimer()
	lags := make([]time.Duration, n)
	for i := range lags {
		lags[i] = seen[i].Sub(sent[i])
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lags[n*99/100].Microseconds())/1000, "p99-ms")
}
