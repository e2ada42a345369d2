package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dataBase is the timestamp of point 0. Point i has timestamp base+i and
// value i, and belongs to series i % series: a point is fully known from its
// sequence number, so the writer only records sequence ranges.
const dataBase = int64(1_700_000_000_000_000_000)

// dataMetric is the metric every writer point uses.
const dataMetric = "e2e"

// dataBatch is one batch the broker answered: points first..first+n-1.
type dataBatch struct {
	first      int64
	n          int
	start, end time.Time
}

// dataFailure is one batch the broker did not acknowledge.
type dataFailure struct {
	at     time.Time // when the answer (or the error) came
	took   time.Duration
	status int // 0: no HTTP answer
	msg    string
}

// dataWriter sends batches to the broker in a loop until stopped, recording
// every acknowledged batch and every failure.
type dataWriter struct {
	t       testing.TB
	urls    []string // brokers' write URLs: a batch not answered goes to the next
	client  *http.Client
	series  int
	perPost int
	first   int64         // sequence number of the first point
	base    int64         // timestamp of point 0 (dataBase unless set)
	max     int           // batches; 0: until stopped
	maxTime time.Duration // 0: until stopped
	// badEvery > 0 writes point i as a malformed line when i % badEvery
	// is 0: its batch is acknowledged by a 400 partial write dropping
	// exactly those lines, and the point is never expected back.
	badEvery int64
	// every > 0 paces the loop: a batch starts no sooner than every after
	// the one before it started. A stall is not caught up afterwards.
	every time.Duration

	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	acked    []dataBatch
	failures []dataFailure
	progress chan struct{} // closed and replaced on every acknowledgement
}

// startDataWriter starts a writer of perPost points per batch over series
// distinct series; it stops on stop(), after max batches or after maxTime.
func startDataWriter(t testing.TB, c *dataCluster, series, perPost, max int, maxTime time.Duration) *dataWriter {
	return launchDataWriter(t, c, 0, series, perPost, max, maxTime)
}

// startDataWriterAt starts a test-sized writer (dataSeries x dataPerPost) whose
// sequence numbers begin at first, for max batches: several writers of one
// test then never write the same point.
func startDataWriterAt(t testing.TB, c *dataCluster, first int64, max int) *dataWriter {
	return launchDataWriter(t, c, first, dataSeries, dataPerPost, max, 0)
}

func launchDataWriter(t testing.TB, c *dataCluster, first int64, series, perPost, max int, maxTime time.Duration) *dataWriter {
	return launchDataWriterOver(t, c, []*Proc{c.broker}, first, series, perPost, max, maxTime, 0)
}

// launchDataWriterOver is launchDataWriter writing through brokers: a
// batch the current one does not acknowledge is followed by one to the next
// (a broker restarting does not stall the writer).
func launchDataWriterOver(t testing.TB, c *dataCluster, brokers []*Proc, first int64, series, perPost, max int, maxTime time.Duration, badEvery int64) *dataWriter {
	return launchPacedWriter(t, c, brokers, dataBase, first, series, perPost, max, maxTime, badEvery, 0)
}

// launchPacedWriter is launchDataWriterOver sending at most one batch per
// every (0: as fast as answers come), point i at timestamp base+i. A paced writer measures whether
// writes stall; an unpaced one on a shared machine measures mostly how
// busy its CPUs are.
func launchPacedWriter(t testing.TB, c *dataCluster, brokers []*Proc, base, first int64, series, perPost, max int, maxTime time.Duration, badEvery int64, every time.Duration) *dataWriter {
	var urls []string
	for _, b := range brokers {
		urls = append(urls, fmt.Sprintf("http://%s/api/v1/write?db=%s", b.addr, c.db))
	}
	w := &dataWriter{base: base, first: first, badEvery: badEvery, every: every,
		t: t, urls: urls,
		// Longer than the broker's own 10 s retry: its 503 is the answer
		// worth recording, not our timeout.
		client: testClient(20 * time.Second),
		series: series, perPost: perPost, max: max, maxTime: maxTime,
		stopCh: make(chan struct{}), done: make(chan struct{}), progress: make(chan struct{}),
	}
	go w.run()
	t.Cleanup(w.stop)
	return w
}

// bad says whether point i is written as a malformed line.
func (w *dataWriter) bad(i int64) bool { return w.badEvery > 0 && i%w.badEvery == 0 }

// acked says whether the answer to the batch of points first..first+n-1
// acknowledges it: 204, or with bad lines the partial write dropping them.
func (w *dataWriter) ackedBy(first int64, n int, status int, msg string) bool {
	dropped := 0
	for i := first; i < first+int64(n); i++ {
		if w.bad(i) {
			dropped++
		}
	}
	if dropped == 0 {
		return status == http.StatusNoContent
	}
	return status == http.StatusBadRequest && strings.Contains(msg, "partial write: ") &&
		strings.Contains(msg, fmt.Sprintf(" dropped=%d\"", dropped))
}

// body is the line protocol of points first..first+n-1.
func (w *dataWriter) body(first int64, n int) []byte {
	var b strings.Builder
	b.Grow(n * 48)
	for i := first; i < first+int64(n); i++ {
		if w.bad(i) {
			fmt.Fprintf(&b, "%s,s=bad value= %d\n", dataMetric, i)
			continue
		}
		b.WriteString(dataMetric)
		b.WriteString(",s=s")
		b.WriteString(strconv.FormatInt(i%int64(w.series), 10))
		b.WriteString(" value=")
		b.WriteString(strconv.FormatInt(i, 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(w.base+i, 10))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func (w *dataWriter) run() {
	defer close(w.done)
	var deadline <-chan time.Time
	if w.maxTime > 0 {
		timer := time.NewTimer(w.maxTime)
		defer timer.Stop()
		deadline = timer.C
	}
	next := w.first
	at := 0 // of urls
	for i := 0; w.max == 0 || i < w.max; i++ {
		select {
		case <-w.stopCh:
			return
		case <-deadline:
			return
		default:
		}
		body := w.body(next, w.perPost)
		begin := time.Now()
		status, msg, err := postData(w.client, w.urls[at], body)
		end := time.Now()
		w.mu.Lock()
		ok := err == nil && w.ackedBy(next, w.perPost, status, msg)
		if ok {
			w.acked = append(w.acked, dataBatch{first: next, n: w.perPost, start: begin, end: end})
			close(w.progress)
			w.progress = make(chan struct{})
		} else {
			if err != nil {
				msg = err.Error()
			}
			w.failures = append(w.failures, dataFailure{at: end, took: end.Sub(begin), status: status, msg: msg})
		}
		w.mu.Unlock()
		// Sequence numbers are never reused, acknowledged or not: a failed
		// batch may have landed on some shards.
		next += int64(w.perPost)
		pause := time.Until(begin.Add(w.every))
		if !ok {
			at = (at + 1) % len(w.urls)
			// A short pause so a fast refusal does not spin.
			pause = 50 * time.Millisecond
		}
		if pause > 0 && !w.pause(pause) {
			return
		}
	}
}

// pause waits d, false when the writer was stopped meanwhile.
func (w *dataWriter) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.stopCh:
		return false
	case <-timer.C:
		return true
	}
}

// stop ends the loop and waits for the batch in flight.
func (w *dataWriter) stop() {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.done
}

// snapshot copies what the writer recorded so far.
func (w *dataWriter) snapshot() ([]dataBatch, []dataFailure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]dataBatch(nil), w.acked...), append([]dataFailure(nil), w.failures...)
}

// waitAcked waits until at least n batches are acknowledged.
func (w *dataWriter) waitAcked(n int, within time.Duration) {
	w.t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		got, ch := len(w.acked), w.progress
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-w.done:
			require.FailNow(w.t, fmt.Sprintf("writer stopped with %d of %d batches acknowledged", got, n))
		case <-timeout.C:
			_, fails := w.snapshot()
			require.FailNow(w.t, fmt.Sprintf("only %d of %d batches acknowledged within %s; failures: %s", got, n, within, describeDataFailures(fails)))
		}
	}
}

// firstAckStartedAfter waits for the first acknowledged batch sent after t0.
func (w *dataWriter) firstAckStartedAfter(t0 time.Time, within time.Duration) dataBatch {
	w.t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		ch := w.progress
		for _, b := range w.acked {
			if !b.start.Before(t0) {
				w.mu.Unlock()
				return b
			}
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-w.done:
			require.FailNow(w.t, "writer stopped before a batch sent after the event was acknowledged")
		case <-timeout.C:
			_, fails := w.snapshot()
			require.FailNow(w.t, fmt.Sprintf("no batch sent after the event acknowledged within %s; failures: %s", within, describeDataFailures(fails)))
		}
	}
}

// dataLongestStall is the longest time between two acknowledgements (or between
// the first send and the first acknowledgement).
func dataLongestStall(acked []dataBatch) time.Duration {
	var worst time.Duration
	for i := 1; i < len(acked); i++ {
		worst = max(worst, acked[i].end.Sub(acked[i-1].end))
	}
	if len(acked) > 0 {
		worst = max(worst, acked[0].end.Sub(acked[0].start))
	}
	return worst
}

func describeDataFailures(fails []dataFailure) string {
	if len(fails) == 0 {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", len(fails))
	for i, f := range fails {
		if i == 5 {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " [%s after %s: %d %s]", f.at.Format("15:04:05.000"), f.took.Round(time.Millisecond), f.status, f.msg)
	}
	return b.String()
}

// verifyAcked checks that every acknowledged point is readable through the
// broker with its value, and returns how many points it checked.
func (c *dataCluster) verifyAcked(w *dataWriter) int {
	c.t.Helper()
	acked, _ := w.snapshot()
	res := c.queryAll(dataMetric, 20*time.Second)
	got := map[string]map[int64]float64{}
	for _, s := range res.Series {
		pts := map[int64]float64{}
		for _, p := range s.Points {
			ts, err := p[0].Int64()
			require.NoError(c.t, err)
			v, err := p[1].Float64()
			require.NoError(c.t, err)
			pts[ts] = v
		}
		got[s.Tags["s"]] = pts
	}
	checked := 0
	var missing []int64
	for _, b := range acked {
		for i := b.first; i < b.first+int64(b.n); i++ {
			if w.bad(i) {
				continue
			}
			checked++
			v, ok := got["s"+strconv.FormatInt(i%int64(w.series), 10)][w.base+i]
			if !ok || v != float64(i) {
				missing = append(missing, i)
			}
		}
	}
	require.Empty(c.t, missing, "%d of %d acknowledged points missing or wrong (first ones: %v)",
		len(missing), checked, missing[:min(len(missing), 10)])
	require.Positive(c.t, checked)
	return checked
}
