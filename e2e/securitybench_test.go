package e2e

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"
)

// BenchmarkClusterSecretOverhead: write throughput of two identical RF 3
// clusters (3 storage nodes, 8 shards) in the same run, one without and one
// with a cluster secret; 5,000-point batches, 4 senders each, both clusters
// written at once. Reports points/s of each and on/off (1.00 = no cost).
// SECBENCH_AA=1 leaves the secret off on both (an A/A run shows the noise).
func BenchmarkClusterSecretOverhead(b *testing.B) {
	bodies := make([][]byte, benchBatches)
	for i := range bodies {
		bodies[i] = benchBody("sec", i)
	}
	off := startDataCluster(b, dataClusterOpts{storageNodes: 3, shards: 8, rf: 3})
	if os.Getenv("SECBENCH_AA") == "" {
		b.Setenv("CAIRN_CLUSTER_SECRET", randomSecret(b, "cs-"))
	}
	on := startDataCluster(b, dataClusterOpts{storageNodes: 3, shards: 8, rf: 3})
	client := testClient(30 * time.Second)
	send := func(c *dataCluster) time.Duration {
		url := fmt.Sprintf("http://%s/api/v1/write?db=%s", c.broker.addr, c.db)
		next := make(chan []byte)
		var wg sync.WaitGroup
		begin := time.Now()
		for range 4 {
			wg.Go(func() {
				for body := range next {
					code, msg, err := postData(client, url, body)
					if err != nil || code != http.StatusNoContent {
						b.Errorf("write: %d %s %v", code, msg, err)
					}
				}
			})
		}
		for _, body := range bodies {
			next <- body
		}
		close(next)
		wg.Wait()
		return time.Since(begin)
	}
	// One untimed round warms connections and memtables. Then both
	// clusters are written at the same time, so every swing in the machine's
	// load (other processes, GC, disk) hits both alike.
	var tOff, tOn time.Duration
	both := func() (time.Duration, time.Duration) {
		var dOff, dOn time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { dOff = send(off) })
		wg.Go(func() { dOn = send(on) })
		wg.Wait()
		return dOff, dOn
	}
	both()
	b.ResetTimer()
	for range b.N {
		dOff, dOn := both()
		tOff += dOff
		tOn += dOn
	}
	b.StopTimer()
	points := float64(b.N * len(bodies) * 5000)
	b.ReportMetric(points/tOff.Seconds(), "off-points/s")
	b.ReportMetric(points/tOn.Seconds(), "on-points/s")
	b.ReportMetric(tOff.Seconds()/tOn.Seconds(), "on/off")
}
