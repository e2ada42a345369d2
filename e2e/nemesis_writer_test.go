package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The nemesis writers send batches of uniquely numbered points: point i has
// timestamp dataBase+i, value i and series s<i % nemSeries>. Each writer owns
// a disjoint range of numbers, so every point names its writer and batch.
const (
	nemMetric  = "nem"
	nemSeries  = 16
	nemPerPost = 50
	// nemWriterSpan separates the writers' number ranges.
	nemWriterSpan = int64(1_000_000_000)
	// nemPace spaces a writer's batches: the machine is shared, and the
	// availability figure needs steady attempts, not maximum throughput.
	nemPace = 50 * time.Millisecond
	// nemMaxFailureNotes bounds the failure messages a writer keeps.
	nemMaxFailureNotes = 20
)

// nemBatch is one acknowledged (204) batch: points first..first+n-1.
type nemBatch struct {
	first      int64
	n          int
	start, end time.Time
}

// nemWriter writes through one broker until stopped.
type nemWriter struct {
	name   string
	url    string
	client *http.Client
	first  int64

	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	next     int64 // first number of the next batch: numbers are never reused
	sent     int
	acked    []nemBatch
	failures map[string]int // "status: message" (trimmed) -> count
	notes    []string       // the first failures, with their time
}

func startNemWriter(name, brokerAddr, db string, index int) *nemWriter {
	first := int64(index) * nemWriterSpan
	w := &nemWriter{
		name: name, url: fmt.Sprintf("http://%s/api/v1/write?db=%s", brokerAddr, db),
		// Longer than the broker's own retry: its answer is what counts.
		client: &http.Client{Timeout: 20 * time.Second},
		first:  first, next: first,
		stopCh: make(chan struct{}), done: make(chan struct{}), failures: map[string]int{},
	}
	go w.run()
	return w
}

func nemBody(first int64, n int) []byte {
	var b strings.Builder
	b.Grow(n * 48)
	for i := first; i < first+int64(n); i++ {
		fmt.Fprintf(&b, "%s,s=s%d value=%d %d\n", nemMetric, i%nemSeries, i, dataBase+i)
	}
	return []byte(b.String())
}

func (w *nemWriter) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stopCh:
			return
		default:
		}
		w.mu.Lock()
		first := w.next
		w.next += nemPerPost
		w.sent++
		w.mu.Unlock()
		begin := time.Now()
		status, msg, err := postData(w.client, w.url, nemBody(first, nemPerPost))
		end := time.Now()
		w.mu.Lock()
		if err == nil && status == http.StatusNoContent {
			w.acked = append(w.acked, nemBatch{first: first, n: nemPerPost, start: begin, end: end})
		} else {
			if err != nil {
				msg = err.Error()
			}
			if len(msg) > 160 {
				msg = msg[:160] + "..."
			}
			key := fmt.Sprintf("%d %s", status, msg)
			w.failures[key]++
			if len(w.notes) < nemMaxFailureNotes {
				w.notes = append(w.notes, end.Format("15:04:05.000")+" "+key)
			}
		}
		w.mu.Unlock()
		t := time.NewTimer(nemPace)
		select {
		case <-w.stopCh:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (w *nemWriter) stop() {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.done
}

// result copies what the writer recorded; call after stop.
func (w *nemWriter) result() (acked []nemBatch, sent int, next int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked), w.sent, w.next
}

// failureSummary is the writer's failures, most frequent first.
func (w *nemWriter) failureSummary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	type kv struct {
		k string
		n int
	}
	var list []kv
	for k, n := range w.failures {
		list = append(list, kv{k, n})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].n > list[j].n })
	var b strings.Builder
	for i, e := range list {
		if i == 5 {
			fmt.Fprintf(&b, "\n      ... %d more kinds", len(list)-5)
			break
		}
		fmt.Fprintf(&b, "\n      %dx %s", e.n, e.k)
	}
	return b.String()
}

// availability is the fraction of whole seconds of [from, to) in which at
// least one batch was acknowledged, and the longest time in [from, to)
// without an acknowledgement.
func availability(acked []nemBatch, from, to time.Time) (float64, time.Duration) {
	if !to.After(from) {
		return 0, 0
	}
	secs := int(to.Sub(from) / time.Second)
	ends := make([]time.Time, 0, len(acked))
	for _, b := range acked {
		if !b.end.Before(from) && b.end.Before(to) {
			ends = append(ends, b.end)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	hit := make([]bool, max(secs, 1))
	for _, e := range ends {
		if i := int(e.Sub(from) / time.Second); i < len(hit) {
			hit[i] = true
		}
	}
	n := 0
	for _, h := range hit {
		if h {
			n++
		}
	}
	prev := from
	var gap time.Duration
	for _, e := range ends {
		gap = max(gap, e.Sub(prev))
		prev = e
	}
	gap = max(gap, to.Sub(prev))
	return float64(n) / float64(len(hit)), gap
}

// seqLabel names a point number by writer and offset, for messages.
func seqLabel(i int64) string {
	return "w" + strconv.FormatInt(i/nemWriterSpan, 10) + "#" + strconv.FormatInt(i%nemWriterSpan, 10)
}

// ackTimeline is the number of acknowledged batches per bucket of [from, to),
// e.g. "10s: 41 40 0 0 12 ...", to show when writes stalled.
func ackTimeline(acked []nemBatch, from, to time.Time) string {
	bucket := max(5*time.Second, (to.Sub(from) / 40).Round(time.Second))
	counts := make([]int, int((to.Sub(from)+bucket-1)/bucket))
	for _, b := range acked {
		if i := int(b.end.Sub(from) / bucket); i >= 0 && i < len(counts) {
			counts[i]++
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "acknowledged batches per %s:", bucket)
	for _, n := range counts {
		fmt.Fprintf(&sb, " %d", n)
	}
	return sb.String()
}
