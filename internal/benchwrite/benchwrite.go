// Package benchwrite is `cairn bench write`, a line-protocol write load
// generator in the shape of InfluxData's inch: C senders, each owning a
// disjoint slice of the series, send batches of one point per series over
// HTTP and count what was acknowledged. It reports points per second, batch
// latencies and failures, and, when it can see the server process in /proc,
// the server's CPU seconds per million points and its RSS.
//
// Series ids start at an offset, so a run can add new series to a node that
// already holds others (series-count growth is what the engine must survive).
package benchwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrInvalidParams wraps every Params.Validate error.
var ErrInvalidParams = errors.New("invalid parameters")

// Params describe one run.
type Params struct {
	URL          string        // the broker's base URL, e.g. http://127.0.0.1:9000
	DB           string        // database written
	Shards       int           // when > 0, the database is created with this many shards (RF 1) if missing
	Series       int           // series written in all, split evenly between senders
	SeriesOffset int           // first series id: a run with a new offset writes new series
	Senders      int           // concurrent HTTP writers
	Batch        int           // points per request
	Fields       string        // field mix: "float=1" (default), "float=2,int=1,string=1,bool=1"
	Duration     time.Duration // how long the senders write
	Precision    string        // the timestamps' unit: ns, us, ms or s
	Measurement  string        // the points' measurement
	Interval     time.Duration // timestamp step between two points of a series
	PID          int           // the server's process id for CPU and RSS (0: looked up when the URL is local)
	Timeout      time.Duration // one request's timeout
	Start        time.Time     // the first timestamp (zero: Duration*... before now, see Validate)
	// LatencyLog, when not nil, gets one line per acknowledged batch once
	// the run ends, in the order they were sent: milliseconds from the
	// run's start to the batch's send, and its latency in milliseconds.
	// When in a run the slow batches came is what p99 alone does not say
	// (a start-up burst, a stall of the server).
	LatencyLog io.Writer

	mix fieldMix
}

var precisionUnits = map[string]time.Duration{"ns": time.Nanosecond, "us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}

// Validate checks p and fills its defaults.
func (p *Params) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidParams, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("--url %q: want http://HOST:PORT", p.URL)
	}
	switch {
	case p.DB == "":
		return bad("--db is required")
	case p.Senders < 1 || p.Senders > 4096:
		return bad("--senders %d: want 1..4096", p.Senders)
	case p.Batch < 1 || p.Batch > 1_000_000:
		return bad("--batch %d: want 1..1000000", p.Batch)
	case p.Series < p.Senders || p.Series > 100_000_000:
		return bad("--series %d: want at least one per sender (%d) and at most 100000000", p.Series, p.Senders)
	case p.SeriesOffset < 0:
		return bad("--series-offset %d: want >= 0", p.SeriesOffset)
	case p.Duration <= 0:
		return bad("--duration %s: want > 0", p.Duration)
	case p.Shards < 0 || p.Shards > 1024:
		return bad("--shards %d: want 0..1024", p.Shards)
	}
	if _, ok := precisionUnits[p.Precision]; !ok {
		return bad("--precision %q: want ns, us, ms or s", p.Precision)
	}
	if p.mix, err = parseFields(p.Fields); err != nil {
		return bad("--fields %q: %v", p.Fields, err)
	}
	if p.Measurement == "" {
		p.Measurement = "bench"
	}
	if p.Interval <= 0 {
		p.Interval = 10 * time.Second
	}
	if p.Timeout <= 0 {
		p.Timeout = 30 * time.Second
	}
	return nil
}

// Result is the run's one JSON line.
type Result struct {
	Senders        int     `json:"senders"`
	Series         int     `json:"series"`
	SeriesOffset   int     `json:"series_offset"`
	Batch          int     `json:"batch"`
	Fields         string  `json:"fields"`
	ElapsedS       float64 `json:"elapsed_s"`
	Points         int64   `json:"points"`
	PointsPerS     float64 `json:"points_per_s"`
	Batches        int64   `json:"batches"`
	FailedBatches  int64   `json:"failed_batches"`
	RetriedBatches int64   `json:"retried_batches"` // 429/503 answers with Retry-After, sent again
	P50Ms          float64 `json:"p50_ms"`
	P99Ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	FirstError     string  `json:"first_error,omitempty"`
	Server         *Server `json:"server,omitempty"`
}

// Run writes for p.Duration and returns the figures. p must have been
// validated. A failed batch is counted, not fatal; only a database that
// cannot be created fails the run.
func Run(ctx context.Context, p Params) (Result, error) {
	client := &http.Client{Timeout: p.Timeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: p.Senders * 2, MaxConnsPerHost: p.Senders * 2}}
	defer client.CloseIdleConnections()
	if p.Shards > 0 {
		if err := createDB(ctx, client, p); err != nil {
			return Result{}, err
		}
	}
	watch := newServerWatch(p, client)
	if p.Start.IsZero() {
		p.Start = time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	}
	writeURL := strings.TrimRight(p.URL, "/") + "/write?db=" + url.QueryEscape(p.DB) + "&precision=" + p.Precision
	senders := make([]*sender, p.Senders)
	per, extra := p.Series/p.Senders, p.Series%p.Senders
	first := p.SeriesOffset
	for i := range senders {
		n := per
		if i < extra {
			n++
		}
		senders[i] = &sender{p: &p, client: client, url: writeURL, first: first, n: n}
		first += n
	}
	watch.begin(ctx)
	begin := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, begin.Add(p.Duration))
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range senders {
		wg.Go(func() { s.run(runCtx) })
	}
	wg.Wait()
	elapsed := time.Since(begin)
	res := Result{Senders: p.Senders, Series: p.Series, SeriesOffset: p.SeriesOffset, Batch: p.Batch,
		Fields: p.mix.String(), ElapsedS: round(elapsed.Seconds(), 3)}
	var lat []time.Duration
	var sent []sentBatch
	for _, s := range senders {
		res.Points += s.points
		res.Batches += s.ok
		res.FailedBatches += s.failed
		res.RetriedBatches += s.retried
		if res.FirstError == "" {
			res.FirstError = s.firstErr
		}
		lat = append(lat, s.lat...)
		if p.LatencyLog != nil {
			for i, l := range s.lat {
				sent = append(sent, sentBatch{at: s.sent[i].Sub(begin), took: l})
			}
		}
	}
	if p.LatencyLog != nil {
		if err := writeLatencyLog(p.LatencyLog, sent); err != nil {
			return Result{}, fmt.Errorf("latency log: %w", err)
		}
	}
	res.PointsPerS = math.Round(float64(res.Points) / elapsed.Seconds())
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50Ms, res.P99Ms, res.MaxMs = percentileMs(lat, 0.50), percentileMs(lat, 0.99), percentileMs(lat, 1)
	res.Server = watch.end(ctx, res.Points)
	return res, nil
}

// sentBatch is an acknowledged batch for the latency log.
type sentBatch struct{ at, took time.Duration }

// writeLatencyLog writes batches by send time, one "sent_ms latency_ms"
// line each.
func writeLatencyLog(w io.Writer, batches []sentBatch) error {
	sort.Slice(batches, func(i, j int) bool { return batches[i].at < batches[j].at })
	var b []byte
	for _, sb := range batches {
		b = strconv.AppendFloat(b, ms(sb.at), 'f', 1, 64)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, ms(sb.took), 'f', 2, 64)
		b = append(b, '\n')
	}
	_, err := w.Write(b)
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return round(float64(sorted[max(i, 0)])/float64(time.Millisecond), 2)
}

func round(v float64, digits int) float64 {
	m := math.Pow10(digits)
	return math.Round(v*m) / m
}

// createDB creates p.DB with p.Shards shards through the REST API; an
// existing database is fine.
func createDB(ctx context.Context, client *http.Client, p Params) error {
	body := fmt.Sprintf(`{"name":%q,"num_shards":%d,"replica_factor":1}`, p.DB, p.Shards)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(p.URL, "/")+"/api/v1/databases", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("creating database %q: %w", p.DB, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		return fmt.Errorf("creating database %q: %s: %s", p.DB, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// sender writes series [first, first+n) in batches of p.Batch points, one
// point per series, in order; a pass over all its series advances the
// timestamp by p.Interval.
type sender struct {
	p        *Params
	client   *http.Client
	url      string
	first, n int

	next     int    // the next series (0..n-1)
	pass     int64  // completed passes over the series
	ts       []byte // " timestamp\n" of pass tsPass
	tsPass   int64
	points   int64
	ok       int64
	failed   int64
	retried  int64
	lat      []time.Duration
	sent     []time.Time // when each batch of lat was sent (only with a latency log)
	firstErr string
}

// keys renders the line-protocol keys ("measurement,tags ") of the
// sender's series.
func (s *sender) keys() [][]byte {
	keys := make([][]byte, s.n)
	for i := range keys {
		keys[i] = seriesKey(s.p.Measurement, s.first+i)
	}
	return keys
}

func (s *sender) run(ctx context.Context) {
	keys := s.keys()
	var body []byte
	for ctx.Err() == nil {
		next, pass := s.next, s.pass
		body = s.batch(body[:0], keys)
		retry, err := s.send(ctx, body)
		switch {
		case err == nil:
			s.ok++
			s.points += int64(s.p.Batch)
		case ctx.Err() != nil:
			return // the run ended during the request: neither counted
		case retry > 0:
			s.retried++
			s.next, s.pass = next, pass // the same points again
			select {
			case <-time.After(retry):
			case <-ctx.Done():
			}
		default:
			s.failed++
			if s.firstErr == "" {
				s.firstErr = err.Error()
			}
		}
	}
}

// batch appends the next p.Batch points to b. The load generator shares
// the processors with the server it measures, so it renders little per
// point: the keys once per run, the timestamp once per pass.
func (s *sender) batch(b []byte, keys [][]byte) []byte {
	for range s.p.Batch {
		if s.ts == nil || s.tsPass != s.pass {
			unit := precisionUnits[s.p.Precision]
			ts := s.p.Start.Add(time.Duration(s.pass)*s.p.Interval).UnixNano() / int64(unit)
			s.ts = append(strconv.AppendInt(append(s.ts[:0], ' '), ts, 10), '\n')
			s.tsPass = s.pass
		}
		b = append(b, keys[s.next]...)
		b = s.p.mix.appendValues(b, s.pass+int64(s.next))
		b = append(b, s.ts...)
		if s.next++; s.next == s.n {
			s.next, s.pass = 0, s.pass+1
		}
	}
	return b
}

// send posts one batch. retry > 0 with an error: the server pushed back
// (429 or 503 with Retry-After) and the batch may be sent again then.
func (s *sender) send(ctx context.Context, body []byte) (retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	begin := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	took := time.Since(begin)
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK {
		s.lat = append(s.lat, took)
		if s.p.LatencyLog != nil {
			s.sent = append(s.sent, begin)
		}
		return 0, nil
	}
	err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if secs, perr := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64); perr == nil && secs >= 0 {
			return max(time.Duration(secs*float64(time.Second)), 10*time.Millisecond), err
		}
	}
	return 0, err
}

// seriesKey is the line-protocol key of series id: its measurement and two
// tags, the second one grouping ids by 1,000 (like hosts in a region).
func seriesKey(measurement string, id int) []byte {
	return fmt.Appendf(nil, "%s,host=h%d,region=r%d ", measurement, id, id/1000)
}
