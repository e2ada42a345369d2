package e2e

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkStandaloneStartToReady measures a fresh standalone node from exec
// to the first 200 of /api/v1/ready (DESIGN.md's start-up figure). Shutdown
// and port picking are outside the timed part.
func BenchmarkStandaloneStartToReady(b *testing.B) {
	took := make([]time.Duration, 0, b.N)
	b.StopTimer()
	for range b.N {
		args := standaloneArgs(b)
		b.StartTimer()
		begin := time.Now()
		p := start(b, args...)
		p.waitStatus("/api/v1/ready", 200, 10*time.Second)
		took = append(took, time.Since(begin))
		b.StopTimer()
		p.term()
	}
	slices.Sort(took)
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.Logf("start to ready, sorted: %v", took)
	b.ReportMetric(float64(sum.Microseconds())/1000/float64(len(took)), "ms/op")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
}
