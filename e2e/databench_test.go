package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchBatches is how many 5,000-point batches one throughput run sends.
const benchBatches = 40

// benchBody is 500 series x 10 timestamps of metric, with timestamps and
// values unique per batch number.
func benchBody(metric string, batch int) []byte {
	var b strings.Builder
	b.Grow(5000 * 48)
	for ts := range 10 {
		at := dataBase + int64(batch)*10 + int64(ts)
		for s := range 500 {
			fmt.Fprintf(&b, "%s,s=s%d value=%d %d\n", metric, s, batch*5000+ts*500+s, at)
		}
	}
	return []byte(b.String())
}

// percentile of sorted durations, in milliseconds.
func percentileMS(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(float64(len(sorted))*p), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

func medianMS(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return percentileMS(s, 0.5)
}

// BenchmarkWriteThroughput: 5,000-point line-protocol batches through one
// broker to 3 storage nodes (8 shards), acknowledged once durable on the
// in-sync replicas. Bodies are generated before the timer starts.
func BenchmarkWriteThroughput(b *testing.B) {
	bodies := make([][]byte, benchBatches)
	for i := range bodies {
		bodies[i] = benchBody("tp", i)
	}
	for _, rf := range []int{1, 3} {
		b.Run(fmt.Sprintf("rf=%d", rf), func(b *testing.B) {
			c := startDataCluster(b, dataClusterOpts{storageNodes: 3, shards: 8, rf: rf})
			url := fmt.Sprintf("http://%s/api/v1/write?db=%s", c.broker.addr, c.db)
			for _, senders := range []int{1, 4} {
				b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) {
					benchWrites(b, url, bodies, senders)
				})
			}
		})
	}
}

func benchWrites(b *testing.B, url string, bodies [][]byte, senders int) {
	client := &http.Client{Timeout: 30 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	begin := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		next := make(chan []byte)
		for range senders {
			wg.Go(func() {
				for body := range next {
					t0 := time.Now()
					code, msg, err := postData(client, url, body)
					took := time.Since(t0)
					if err != nil || code != http.StatusNoContent {
						b.Errorf("write: %d %s %v", code, msg, err)
						continue
					}
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
				}
			})
		}
		for _, body := range bodies {
			next <- body
		}
		close(next)
		wg.Wait()
	}
	elapsed := time.Since(begin)
	b.StopTimer()
	slices.Sort(lat)
	points := float64(b.N * len(bodies) * 5000)
	b.ReportMetric(points/elapsed.Seconds(), "points/s")
	b.ReportMetric(percentileMS(lat, 0.5), "p50-ms")
	b.ReportMetric(percentileMS(lat, 0.99), "p99-ms")
}

// BenchmarkFailover: 10 times, kill -9 the storage node leading the most
// shards and time until a batch touching every shard is acknowledged again,
// then restart it and wait until every shard has 3 in-sync replicas.
func BenchmarkFailover(b *testing.B) {
	c := startDataCluster(b, dataClusterOpts{storageNodes: 3, shards: 8, rf: 3})
	url := fmt.Sprintf("http://%s/api/v1/write?db=%s", c.broker.addr, c.db)
	client := &http.Client{Timeout: 30 * time.Second}
	w := &dataWriter{series: dataSeries}
	var took []time.Duration
	seq := int64(0)
	b.ResetTimer()
	for range b.N {
		for range 10 {
			victim, _ := c.busiestLeader()
			p := c.proc(victim)
			killed := time.Now()
			p.kill9()
			for {
				// The broker retries each shard while the state catches
				// up; a 503 after its 10 s budget sends the batch again.
				code, msg, err := postData(client, url, w.body(seq, dataPerPost))
				seq += dataPerPost
				if err == nil && code == http.StatusNoContent {
					break
				}
				require.Less(b, time.Since(killed), 30*time.Second, "no write accepted after the kill: %d %s %v", code, msg, err)
			}
			took = append(took, time.Since(killed))
			p.restart()
			c.waitHealthy(30 * time.Second)
		}
	}
	b.StopTimer()
	b.Logf("kill -9 to every shard writable again: %v", took)
	b.ReportMetric(medianMS(took), "median-ms")
	b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "max-ms")
}

// BenchmarkQuery1M: one series of 1,000,000 points (200 batches of 5,000),
// then GET /query over its full range; the time includes reading the whole
// JSON answer.
func BenchmarkQuery1M(b *testing.B) {
	c := startDataCluster(b, dataClusterOpts{storageNodes: 3, shards: 8, rf: 1})
	client := &http.Client{Timeout: 2 * time.Minute}
	url := fmt.Sprintf("http://%s/api/v1/write?db=%s", c.broker.addr, c.db)
	for batch := range 200 {
		var sb strings.Builder
		sb.Grow(5000 * 40)
		for i := range 5000 {
			n := int64(batch*5000 + i)
			sb.WriteString("big,s=one value=")
			sb.WriteString(strconv.FormatInt(n, 10))
			sb.WriteByte(' ')
			sb.WriteString(strconv.FormatInt(dataBase+n, 10))
			sb.WriteByte('\n')
		}
		code, msg, err := postData(client, url, []byte(sb.String()))
		require.NoError(b, err)
		require.Equal(b, http.StatusNoContent, code, msg)
	}
	q := fmt.Sprintf("http://%s/api/v1/query?db=%s&metric=big&start=0&end=%d", c.broker.addr, c.db, int64(1)<<62)
	// One untimed read checks the answer holds every point.
	var res dataQueryResult
	resp, err := client.Get(q)
	require.NoError(b, err)
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	err = dec.Decode(&res)
	resp.Body.Close()
	require.NoError(b, err)
	require.Len(b, res.Series, 1)
	require.Len(b, res.Series[0].Points, 1_000_000)

	var took []time.Duration
	var size int64
	b.ResetTimer()
	for range b.N {
		for range 3 {
			t0 := time.Now()
			resp, err := client.Get(q)
			require.NoError(b, err)
			size, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.NoError(b, err)
			require.Equal(b, 200, resp.StatusCode)
			took = append(took, time.Since(t0))
		}
	}
	b.StopTimer()
	b.Logf("query of 1M points (%d bytes of JSON): %v", size, took)
	b.ReportMetric(medianMS(took), "median-ms")
}
