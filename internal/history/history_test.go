package history

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// brokerMetrics mimics the names the broker and storage packages register
// (app's test checks the real ones feed the ring).
type fakeNode struct {
	reg      *prometheus.Registry
	points   *prometheus.CounterVec
	writeDur prometheus.Histogram
	queryDur prometheus.Histogram
	replicas *prometheus.GaugeVec
	lagSecs  *prometheus.GaugeVec
}

func newFakeNode() *fakeNode {
	f := &fakeNode{reg: prometheus.NewRegistry()}
	f.points = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_broker_write_points_total", Help: "h"}, []string{"database", "status"})
	f.writeDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_broker_write_duration_seconds", Help: "h", Buckets: []float64{0.01, 0.1, 1}})
	f.queryDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_broker_query_duration_seconds", Help: "h"})
	f.replicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_storage_replicas", Help: "h"}, []string{"role"})
	f.lagSecs = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_storage_follower_lag_seconds", Help: "h"}, []string{"follower"})
	f.reg.MustRegister(f.points, f.writeDur, f.queryDur, f.replicas, f.lagSecs)
	return f
}

func val(t *testing.T, s models.HistorySeries, name string, i int) *float64 {
	t.Helper()
	col := s.Values[name]
	require.Len(t, col, len(s.Time), name)
	return col[i]
}

func TestRecorderRatesLatencyAndRing(t *testing.T) {
	f := newFakeNode()
	r := New(Config{NodeID: "n1", Gatherer: f.reg, Interval: 10 * time.Second, Window: 40 * time.Second})
	t0 := time.Unix(1_700_000_000, 0)
	f.replicas.WithLabelValues("leader").Set(3)
	f.replicas.WithLabelValues("follower").Set(2)
	r.Sample(t0)

	// 10 s later: 500 durable points, 10 writes (9 fast, 1 slow), 4 queries.
	f.points.WithLabelValues("db", "204").Add(500)
	f.points.WithLabelValues("db", "503").Add(70) // failed writes are not throughput
	for range 9 {
		f.writeDur.Observe(0.005)
	}
	f.writeDur.Observe(0.5)
	for range 4 {
		f.queryDur.Observe(0.01)
	}
	f.lagSecs.WithLabelValues("n2").Set(1.5)
	f.lagSecs.WithLabelValues("n3").Set(4)
	r.Sample(t0.Add(10 * time.Second))

	s := r.Snapshot()
	require.Equal(t, "n1", s.NodeID)
	require.Equal(t, []int64{t0.Unix(), t0.Unix() + 10}, s.Time)
	require.Nil(t, val(t, s, WritePointsPerS, 0), "no rate without a previous sample")
	require.InDelta(t, 50, *val(t, s, WritePointsPerS, 1), 1e-9)
	require.InDelta(t, 0.4, *val(t, s, QueriesPerS, 1), 1e-9)
	// p99 of 10 observations: rank 9.9 falls in the (0.1, 1] bucket holding 1.
	require.InDelta(t, 0.1+0.9*0.9, *val(t, s, WriteP99Seconds, 1), 1e-9)
	require.Equal(t, 3.0, *val(t, s, Leaders, 1))
	require.Equal(t, 5.0, *val(t, s, Shards, 1))
	require.Equal(t, 4.0, *val(t, s, FollowerLagSeconds, 1))
	require.Equal(t, 0.0, *val(t, s, FollowerLagEntries, 1), "storage node without that family: no lag")
	require.Nil(t, val(t, s, StoredPointsPerS, 1), "no storage write metrics: null, not zero")

	// No writes in the next interval: rate 0, latency unknown.
	r.Sample(t0.Add(20 * time.Second))
	s = r.Snapshot()
	require.Equal(t, 0.0, *val(t, s, WritePointsPerS, 2))
	require.Nil(t, val(t, s, WriteP99Seconds, 2))

	// The ring keeps Window/Interval = 4 samples, oldest first.
	for i := 3; i < 7; i++ {
		r.Sample(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	s = r.Snapshot()
	require.Equal(t, []int64{t0.Unix() + 30, t0.Unix() + 40, t0.Unix() + 50, t0.Unix() + 60}, s.Time)
	for _, name := range Names {
		require.Len(t, s.Values[name], 4, name)
	}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(data), `"write_p99_seconds":[null,null,null,null]`)
}

func TestRecorderBounded(t *testing.T) {
	r := New(Config{Gatherer: prometheus.NewRegistry(), Interval: 100 * time.Millisecond, Window: 24 * time.Hour})
	require.Equal(t, MaxSamples, r.cap)
}

func TestClusterCollect(t *testing.T) {
	self := New(Config{NodeID: "a", Gatherer: newFakeNode().reg, Interval: time.Second})
	self.Sample(time.Unix(100, 0))
	peerRec := New(Config{NodeID: "b", Gatherer: newFakeNode().reg, Interval: time.Second})
	peerRec.Sample(time.Unix(100, 0))
	peerRec.Sample(time.Unix(101, 0))
	serve := func(s any) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/internal/v1/history" {
				http.Error(w, "want /internal/v1/history", http.StatusNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(s)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	good := serve(peerRec.Snapshot())
	liar := serve(models.HistorySeries{NodeID: "someone-else"})
	ragged := serve(models.HistorySeries{NodeID: "d", Time: []int64{1, 2}, Values: map[string][]*float64{Leaders: {nil}}})
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	fetch := func(ctx context.Context, p Peer, limit int64) ([]byte, error) {
		return client.New(http.DefaultClient).History(ctx, client.Peer{ID: p.NodeID, Address: p.Address}, limit)
	}
	c := &Cluster{Self: self, Fetch: fetch, Peers: func() []Peer {
		return []Peer{{"e", addr(dead)}, {"b", addr(good)}, {"c", addr(liar)}, {"d", addr(ragged)}}
	}}
	out := c.Collect(context.Background())
	require.Equal(t, Names, out.Series)
	require.Len(t, out.Nodes, 5)
	require.Equal(t, "a", out.Nodes[0].NodeID)
	require.Len(t, out.Nodes[0].Time, 1)
	require.Equal(t, "b", out.Nodes[1].NodeID)
	require.Empty(t, out.Nodes[1].Error)
	require.Len(t, out.Nodes[1].Time, 2)
	require.Len(t, out.Nodes[1].Values[Leaders], 2)
	require.Contains(t, out.Nodes[2].Error, `answered as "someone-else"`)
	require.Contains(t, out.Nodes[3].Error, "has 1 values for 2 times")
	require.Contains(t, out.Nodes[4].Error, "node e: ")
	require.False(t, out.Truncated)

	c.MaxPeers = 2
	out = c.Collect(context.Background())
	require.Len(t, out.Nodes, 3)
	require.True(t, out.Truncated)
}
