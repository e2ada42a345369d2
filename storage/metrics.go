package storage

import (
	"slices"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a storage node. The per-replica gauges are computed from the
// host's replicas at scrape time, so no replication code path has to keep
// them up to date.
type metrics struct {
	h           *Host
	writePoints prometheus.Counter
	writeTime   prometheus.Histogram
	replicas    *prometheus.Desc
	missing     *prometheus.Desc
	lagEntries  *prometheus.Desc
	lagSeconds  *prometheus.Desc
}

func newMetrics(h *Host, reg prometheus.Registerer) *metrics {
	m := &metrics{
		h: h,
		writePoints: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_storage_write_points_total",
			Help: "Points this node wrote as shard leader and its in-sync replicas confirmed."}),
		writeTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_storage_write_duration_seconds",
			Help:    "Time a shard leader takes to apply a batch and get it confirmed by its in-sync replicas.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}), // 0.5 ms .. 16 s
		replicas: prometheus.NewDesc("cairn_storage_replicas",
			"Shard replicas open on this node, by role (leader, follower, idle: assigned but its shard has no live leader).", []string{"role"}, nil),
		missing: prometheus.NewDesc("cairn_storage_insync_replicas_missing",
			"Replicas of the shards this node leads that are outside the shard's in-sync set.", nil, nil),
		lagEntries: prometheus.NewDesc("cairn_storage_follower_lag_entries",
			"Log entries a follower still lacks, largest over the shards this node leads, by follower node.", []string{"follower"}, nil),
		lagSeconds: prometheus.NewDesc("cairn_storage_follower_lag_seconds",
			"Seconds since a follower last had everything, largest over the shards this node leads, by follower node (0: caught up).", []string{"follower"}, nil),
	}
	// What queries read, from the engine's process-wide counters: a GROUP
	// BY time answered from a rollup reads cells, not blocks.
	blocks := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_storage_blocks_read_total",
		Help: "Blocks of raw points this node decoded for reads (queries, and rollup cells computed again from the points)."},
		func() float64 { return float64(engine.BlockReads()) })
	cells := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_storage_rollup_cells_read_total",
		Help: "Rollup cells this node's queries read."}, func() float64 { return float64(engine.RollupReads()) })
	reg.MustRegister(m.writePoints, m.writeTime, m, blocks, cells)
	return m
}

// observeWrite records one leader write; err points at its outcome.
func (m *metrics) observeWrite(start time.Time, points int, err *error) {
	if m == nil {
		return
	}
	m.writeTime.Observe(time.Since(start).Seconds())
	if *err == nil {
		m.writePoints.Add(float64(points))
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.replicas
	ch <- m.missing
	ch <- m.lagEntries
	ch <- m.lagSeconds
}

type lag struct {
	entries uint64
	seconds float64
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	roles := map[string]int{"leader": 0, "follower": 0, "idle": 0}
	missing := 0
	lags := map[string]lag{}
	m.h.mu.RLock()
	reps := make([]*replica, 0, len(m.h.replicas))
	for _, r := range m.h.replicas {
		reps = append(reps, r)
	}
	m.h.mu.RUnlock()
	for _, r := range reps {
		last := r.eng.LastTxnID()
		r.mu.Lock()
		switch r.want.role {
		case roleLeader:
			roles["leader"]++
			for _, n := range r.want.replicas {
				if n == m.h.nodeID {
					continue
				}
				if !slices.Contains(r.ls.isr, n) {
					missing++
				}
				l := lags[n]
				if acked := r.ls.acked[n]; acked < last {
					l.entries = max(l.entries, last-acked)
					since := r.ls.caught[n]
					if since.IsZero() {
						since = r.since // never caught up in this term
					}
					l.seconds = max(l.seconds, now.Sub(since).Seconds())
				}
				lags[n] = l
			}
		case roleFollower:
			roles["follower"]++
		default:
			roles["idle"]++
		}
		r.mu.Unlock()
	}
	for role, n := range roles {
		ch <- prometheus.MustNewConstMetric(m.replicas, prometheus.GaugeValue, float64(n), role)
	}
	ch <- prometheus.MustNewConstMetric(m.missing, prometheus.GaugeValue, float64(missing))
	for n, l := range lags {
		ch <- prometheus.MustNewConstMetric(m.lagEntries, prometheus.GaugeValue, float64(l.entries), n)
		ch <- prometheus.MustNewConstMetric(m.lagSeconds, prometheus.GaugeValue, l.seconds, n)
	}
}
