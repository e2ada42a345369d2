package broker

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/web"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the broker's data path. Requests are labelled with the database
// only when it exists (else ""), so a client sending random names cannot grow
// the series without bound, and with the HTTP status they answer.
type Metrics struct {
	writeRequests *prometheus.CounterVec
	writePoints   *prometheus.CounterVec
	writeBytes    *prometheus.CounterVec
	writeDuration prometheus.Histogram
	queryRequests *prometheus.CounterVec
	queryDuration prometheus.Histogram
}

// NewMetrics registers the data path's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"database", "status"}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 15) // 1 ms .. 16 s
	m := &Metrics{
		writeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_broker_write_requests_total",
			Help: "Write requests answered by this broker, by database and HTTP status."}, labels),
		writePoints: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_broker_write_points_total",
			Help: "Points in the write requests answered by this broker, by database and HTTP status (204: durable)."}, labels),
		writeBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_broker_write_bytes_total",
			Help: "Line-protocol bytes received in write requests, by database and HTTP status."}, labels),
		writeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_broker_write_duration_seconds",
			Help: "Time from receiving a write to answering it (durable on the in-sync replicas for a 204).", Buckets: buckets}),
		queryRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_broker_query_requests_total",
			Help: "Query requests answered by this broker, by database and HTTP status."}, labels),
		queryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_broker_query_duration_seconds",
			Help: "Time from receiving a query to having every shard's answer.", Buckets: buckets}),
	}
	reg.MustRegister(m.writeRequests, m.writePoints, m.writeBytes, m.writeDuration, m.queryRequests, m.queryDuration)
	return m
}

// Write implements web.Data, recording the request.
func (d *Data) Write(ctx context.Context, db, precision string, body []byte) error {
	start := time.Now()
	n, err := d.write(ctx, db, precision, body)
	if m := d.Metrics; m != nil {
		l := []string{d.dbLabel(db), statusLabel(err, http.StatusNoContent)}
		m.writeRequests.WithLabelValues(l...).Inc()
		m.writePoints.WithLabelValues(l...).Add(float64(n))
		m.writeBytes.WithLabelValues(l...).Add(float64(len(body)))
		m.writeDuration.Observe(time.Since(start).Seconds())
	}
	return err
}

// Query implements web.Data, recording the request.
func (d *Data) Query(ctx context.Context, q web.Query) (any, error) {
	start := time.Now()
	out, err := d.query(ctx, q)
	if m := d.Metrics; m != nil {
		m.queryRequests.WithLabelValues(d.dbLabel(q.DB), statusLabel(err, http.StatusOK)).Inc()
		m.queryDuration.Observe(time.Since(start).Seconds())
	}
	return out, err
}

func (d *Data) dbLabel(db string) string {
	if _, ok := d.State().Databases[db]; ok {
		return db
	}
	return ""
}

func statusLabel(err error, ok int) string {
	if err == nil {
		return strconv.Itoa(ok)
	}
	return strconv.Itoa(web.StatusOf(err))
}
