package statemachine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// BenchmarkQueueAndReducers pushes decoded events through the one queue and the
// one consumer: b.N events, measured until the last is applied.
func BenchmarkQueueAndReducers(b *testing.B) {
	m := statemachine.New(statemachine.Config{QueueSize: 8192})
	m.Start(context.Background())
	defer m.Stop()
	evs := make([]statemachine.Event, 256)
	for i := range evs {
		id := "n" + strconv.Itoa(i%64)
		evs[i] = statemachine.Event{Source: "nodes", Kind: statemachine.KindStorageNodes, Cluster: "default",
			Type: kv.WatchPut, Name: id, Value: models.StorageNode{NodeID: id, LastUpdated: int64(i)}, Rev: int64(i + 1)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Push(evs[i%len(evs)])
	}
	// Wait for the consumer to drain: one final marker event.
	m.Push(statemachine.Event{Source: "end", Type: kv.WatchSynced, Rev: 1})
	for {
		changed := m.Changed()
		if m.Snapshot().Synced["end"] {
			break
		}
		<-changed
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkSnapshotRead(b *testing.B) {
	m := statemachine.New(statemachine.Config{})
	b.ReportAllocs()
	var n int
	for i := 0; i < b.N; i++ {
		n += len(m.Snapshot().Databases)
	}
	_ = n
}
