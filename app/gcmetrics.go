package app

import (
	"regexp"
	"runtime/metrics"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// runtimeCPUMetrics are the Go runtime's CPU-time estimates exported beside
// the default Go metrics: go_cpu_classes_gc_total_cpu_seconds_total over
// go_cpu_classes_total_cpu_seconds_total is the collector's share of the
// CPU that GOMAXPROCS offers, between any two scrapes.
var runtimeCPUMetrics = collectors.GoRuntimeMetricsRule{
	Matcher: regexp.MustCompile(`^/cpu/classes/(gc/total|total):cpu-seconds$`)}

// gcFraction is cairn_gc_cpu_fraction: the collector's share of the
// available CPU (GOMAXPROCS x wall time) since the previous scrape, so that
// a dashboard sees a collector running nonstop without computing rates.
type gcFraction struct {
	desc *prometheus.Desc

	mu              sync.Mutex
	lastGC, lastAll float64
}

func newGCFraction() *gcFraction {
	return &gcFraction{desc: prometheus.NewDesc("cairn_gc_cpu_fraction",
		"The Go collector's share of the CPU GOMAXPROCS offers since the previous scrape (since start at the first).", nil, nil)}
}

func (g *gcFraction) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *gcFraction) Collect(ch chan<- prometheus.Metric) {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(s)
	gc, all := s[0].Value.Float64(), s[1].Value.Float64()
	g.mu.Lock()
	dGC, dAll := gc-g.lastGC, all-g.lastAll
	g.lastGC, g.lastAll = gc, all
	g.mu.Unlock()
	frac := 0.0
	if dAll > 0 {
		frac = dGC / dAll
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, frac)
}
