package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/models"
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

// Write parses a line-protocol batch and writes it to every shard it
// touches, recording the request. body is the call's to keep: nothing may
// change it after (the points' strings point into it).
func (d *Data) Write(ctx context.Context, db, precision string, body []byte) error {
	start := time.Now()
	n, err := d.write(ctx, db, precision, body)
	d.recordWrite(db, n, len(body), start, err)
	return err
}

// Query fans a query out to the database's shard leaders, recording the
// request.
func (d *Data) Query(ctx context.Context, q models.Query) (json.RawMessage, error) {
	start := time.Now()
	out, err := d.query(ctx, q)
	d.recordQuery(q.DB, start, err)
	return out, err
}

// recordWrite records one write request that began at start: every write
// entry point (this API's and the InfluxDB-compatible ones) goes through it.
func (d *Data) recordWrite(db string, points, bytes int, start time.Time, err error) {
	m := d.Metrics
	if m == nil {
		return
	}
	l := []string{d.dbLabel(db), statusLabel(err, http.StatusNoContent)}
	m.writeRequests.WithLabelValues(l...).Inc()
	m.writePoints.WithLabelValues(l...).Add(float64(points))
	m.writeBytes.WithLabelValues(l...).Add(float64(bytes))
	m.writeDuration.Observe(time.Since(start).Seconds())
}

// recordQuery records one query request that began at start, for every
// query entry point.
func (d *Data) recordQuery(db string, start time.Time, err error) {
	m := d.Metrics
	if m == nil {
		return
	}
	m.queryRequests.WithLabelValues(d.dbLabel(db), statusLabel(err, http.StatusOK)).Inc()
	m.queryDuration.Observe(time.Since(start).Seconds())
}

func (d *Data) dbLabel(db string) string {
	if _, ok := d.State().Databases.Get(db); ok {
		return db
	}
	return ""
}

func statusLabel(err error, ok int) string {
	if err == nil {
		return strconv.Itoa(ok)
	}
	return strconv.Itoa(status(err))
}

func status(err error) int {
	s, _ := models.StatusOf(err)
	return s
}
