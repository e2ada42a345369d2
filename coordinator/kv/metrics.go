package kv

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// etcd operations as they appear in the "operation" label.
const (
	opGet          = "get"
	opList         = "list"
	opPut          = "put"
	opDelete       = "delete"
	opDeletePrefix = "delete_prefix"
	opTxn          = "txn"
	opGrant        = "grant"
	opRevoke       = "revoke"
	opKeepAlive    = "keepalive"
	opWatch        = "watch"
	opCompact      = "compact"
	opHeader       = "header"
	opAlarms       = "alarms"
)

var etcdOps = []string{opGet, opList, opPut, opDelete, opDeletePrefix, opTxn, opGrant, opRevoke, opKeepAlive, opWatch, opCompact, opHeader, opAlarms}

// EtcdMetrics counts the requests EtcdStores make, by operation. One value is
// shared by every store of a process (Cairn's own etcd and the etcds of
// storage clusters), so the series stay one per operation.
type EtcdMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewEtcdMetrics registers the etcd request metrics on reg. Every operation's
// series exist from the start, at zero, so a rate() over them is defined
// before the first error.
func NewEtcdMetrics(reg prometheus.Registerer) *EtcdMetrics {
	m := &EtcdMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cairn_etcd_request_duration_seconds",
			Help:    "Latency of requests to etcd, by operation (watches and keep-alives are streams: errors only).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. 4 s
		}, []string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_etcd_request_errors_total",
			Help: "Requests to etcd that failed (unreachable, timed out, compacted, refused), by operation; callers cancelling are not counted.",
		}, []string{"operation"}),
	}
	for _, op := range etcdOps {
		m.errors.WithLabelValues(op)
		if op != opWatch && op != opKeepAlive {
			m.duration.WithLabelValues(op)
		}
	}
	reg.MustRegister(m.duration, m.errors)
	return m
}

// observe records one finished request; nil metrics record nothing.
func (m *EtcdMetrics) observe(op string, took time.Duration, err error) {
	if m == nil {
		return
	}
	if op != opWatch && op != opKeepAlive {
		m.duration.WithLabelValues(op).Observe(took.Seconds())
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		m.errors.WithLabelValues(op).Inc()
	}
}

// call is the one wrapper around every unary etcd request: it applies the
// default deadline, maps the error to the package sentinels and records the
// request's latency and outcome.
func (s *EtcdStore) call(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return s.observed(ctx, op, mapErr, fn)
}

// callWrite is call for writes: a write that timed out or lost its
// connection has an unknown outcome (mapWriteErr), never "nothing changed".
func (s *EtcdStore) callWrite(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return s.observed(ctx, op, mapWriteErr, fn)
}

func (s *EtcdStore) observed(ctx context.Context, op string, mapper func(error) error, fn func(ctx context.Context) error) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	// etcd refuses before proposing, so even a write is safe to retry.
	if err != nil && s.login && errors.Is(mapErr(err), ErrAccessDenied) && s.relogin(ctx) == nil {
		err = fn(ctx)
	}
	if err != nil {
		err = mapper(err)
	}
	s.metrics.observe(op, time.Since(start), err)
	return err
}
