// Package history keeps a node's recent activity for the console's charts: a
// bounded ring of samples (write and query rates, latency, shard counts,
// follower lag) taken from the node's own Prometheus registry at a fixed
// interval, so the charts and /metrics can never disagree. Each node serves
// its own ring; Cluster gathers every live node's.
package history

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The sampled series, in the order of their columns.
const (
	WritePointsPerS      = "write_points_per_s"      // broker: points written (durable) per second
	WriteP99Seconds      = "write_p99_seconds"       // broker: p99 write latency over the interval
	QueriesPerS          = "queries_per_s"           // broker: queries answered per second
	StoredPointsPerS     = "stored_points_per_s"     // storage: points written as shard leader per second
	ShardWriteP99Seconds = "shard_write_p99_seconds" // storage: p99 of a leader's apply + replication
	Leaders              = "leaders"                 // storage: shards led
	Shards               = "shards"                  // storage: shard replicas hosted
	FollowerLagEntries   = "follower_lag_entries"    // storage: largest lag of a follower of a led shard
	FollowerLagSeconds   = "follower_lag_seconds"
)

// Names lists the series in column order.
var Names = []string{WritePointsPerS, WriteP99Seconds, QueriesPerS, StoredPointsPerS, ShardWriteP99Seconds,
	Leaders, Shards, FollowerLagEntries, FollowerLagSeconds}

// MaxSamples bounds a ring whatever the interval and window.
const MaxSamples = 3600

// Config of a Recorder.
type Config struct {
	NodeID   string
	Gatherer prometheus.Gatherer
	// Interval between samples; default 10s.
	Interval time.Duration
	// Window is how far back the ring reaches; default 1h. The ring holds
	// Window/Interval samples, at most MaxSamples.
	Window time.Duration
}

// Recorder samples the node's metrics into a ring.
type Recorder struct {
	cfg Config
	cap int

	mu    sync.Mutex
	ring  []sample // len <= cap, oldest at head once full
	head  int
	prev  *totals
	prevT time.Time
}

type sample struct {
	t int64 // unix seconds
	v [9]float64
}

// totals are the cumulative values rates are computed from.
type totals struct {
	writePoints, queries, stored float64
	writeHist, storeHist         []bucket
	has                          map[string]bool
}

type bucket struct {
	upper float64
	count uint64
}

// New makes a Recorder; Run drives it.
func New(cfg Config) *Recorder {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Hour
	}
	n := int(min(int64(cfg.Window/cfg.Interval), MaxSamples))
	return &Recorder{cfg: cfg, cap: max(n, 1)}
}

// Interval is the sampling interval.
func (r *Recorder) Interval() time.Duration { return r.cfg.Interval }

// Run samples every interval until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	r.Sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.Sample(now)
		}
	}
}

// Sample gathers the registry once and appends a sample taken at now. Rates
// and latency need a previous sample: the first one has them as null.
func (r *Recorder) Sample(now time.Time) {
	fams, err := r.cfg.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	cur := &totals{has: map[string]bool{}}
	var s sample
	s.t = now.Unix()
	for i := range s.v {
		s.v[i] = math.NaN()
	}
	if f := byName["cairn_broker_write_points_total"]; f != nil {
		cur.writePoints, cur.has["write"] = sumWhere(f, "status", "204"), true
	} else if byName["cairn_broker_write_duration_seconds"] != nil {
		cur.has["write"] = true // a broker that has not written yet
	}
	if f := byName["cairn_broker_write_duration_seconds"]; f != nil {
		cur.writeHist = histogram(f)
	}
	if f := byName["cairn_broker_query_duration_seconds"]; f != nil {
		cur.queries, cur.has["query"] = float64(histCount(f)), true
	}
	if f := byName["cairn_storage_write_points_total"]; f != nil {
		cur.stored, cur.has["store"] = sumWhere(f, "", ""), true
	}
	if f := byName["cairn_storage_write_duration_seconds"]; f != nil {
		cur.storeHist = histogram(f)
	}
	if f := byName["cairn_storage_replicas"]; f != nil {
		s.v[5] = sumWhere(f, "role", "leader")
		s.v[6] = sumWhere(f, "", "")
		s.v[7], s.v[8] = 0, 0 // a storage node without followers lags by nothing
		if f := byName["cairn_storage_follower_lag_entries"]; f != nil {
			s.v[7] = maxOf(f)
		}
		if f := byName["cairn_storage_follower_lag_seconds"]; f != nil {
			s.v[8] = maxOf(f)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.prev; p != nil {
		dt := now.Sub(r.prevT).Seconds()
		if dt > 0 {
			if cur.has["write"] && p.has["write"] {
				s.v[0] = rate(p.writePoints, cur.writePoints, dt)
				s.v[1] = quantile(0.99, p.writeHist, cur.writeHist)
			}
			if cur.has["query"] && p.has["query"] {
				s.v[2] = rate(p.queries, cur.queries, dt)
			}
			if cur.has["store"] && p.has["store"] {
				s.v[3] = rate(p.stored, cur.stored, dt)
				s.v[4] = quantile(0.99, p.storeHist, cur.storeHist)
			}
		}
	}
	r.prev, r.prevT = cur, now
	if len(r.ring) < r.cap {
		r.ring = append(r.ring, s)
		return
	}
	r.ring[r.head] = s
	r.head = (r.head + 1) % r.cap
}

// Snapshot returns the ring in columns, oldest sample first.
func (r *Recorder) Snapshot() models.HistorySeries {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := models.HistorySeries{NodeID: r.cfg.NodeID, IntervalS: r.cfg.Interval.Seconds(), Time: make([]int64, 0, len(r.ring)),
		Values: make(map[string][]*float64, len(Names))}
	cols := make([][]*float64, len(Names))
	for i := range cols {
		cols[i] = make([]*float64, 0, len(r.ring))
	}
	for k := range r.ring {
		s := r.ring[(r.head+k)%len(r.ring)]
		out.Time = append(out.Time, s.t)
		for i, v := range s.v {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				cols[i] = append(cols[i], nil)
				continue
			}
			cols[i] = append(cols[i], &v)
		}
	}
	for i, name := range Names {
		out.Values[name] = cols[i]
	}
	return out
}

func rate(prev, cur, dt float64) float64 {
	if cur < prev { // counter reset
		return math.NaN()
	}
	return (cur - prev) / dt
}

func sumWhere(f *dto.MetricFamily, label, value string) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

func maxOf(f *dto.MetricFamily) float64 {
	out := 0.0
	for _, m := range f.GetMetric() {
		out = max(out, m.GetGauge().GetValue())
	}
	return out
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

func histCount(f *dto.MetricFamily) uint64 {
	var n uint64
	for _, m := range f.GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// histogram merges a family's series into cumulative buckets (+Inf last).
func histogram(f *dto.MetricFamily) []bucket {
	var out []bucket
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		for i, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				break // the implicit +Inf bucket is the sample count, added below
			}
			if i >= len(out) {
				out = append(out, bucket{upper: b.GetUpperBound()})
			}
			out[i].count += b.GetCumulativeCount()
		}
		if len(out) == 0 || !math.IsInf(out[len(out)-1].upper, 1) {
			out = append(out, bucket{upper: math.Inf(1)})
		}
		out[len(out)-1].count += h.GetSampleCount()
	}
	return out
}

// quantile estimates the q-quantile of the observations made between two
// cumulative histograms, interpolating linearly inside the bucket it falls
// in, as Prometheus' histogram_quantile does; NaN when nothing was observed.
func quantile(q float64, prev, cur []bucket) float64 {
	if len(cur) == 0 || len(prev) != len(cur) {
		return math.NaN()
	}
	total := cur[len(cur)-1].count - prev[len(prev)-1].count
	if cur[len(cur)-1].count < prev[len(prev)-1].count || total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	lower, below := 0.0, 0.0
	for i, b := range cur {
		n := float64(b.count - prev[i].count)
		if n >= rank {
			if math.IsInf(b.upper, 1) {
				return lower // beyond the last finite bound: report that bound
			}
			inBucket := n - below
			if inBucket <= 0 {
				return b.upper
			}
			return lower + (b.upper-lower)*(rank-below)/inBucket
		}
		lower, below = b.upper, n
	}
	return lower
}
