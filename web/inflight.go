package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
)

// inflight bounds the write body bytes a node holds at once, over every
// write endpoint: a parsed batch, split per shard and encoded for the log,
// holds several times its body, so without a bound many concurrent senders
// could grow a node's memory without limit. A write past the bound waits
// for others to finish, up to a deadline, then is refused with 503 (retry).
type inflight struct {
	max int64

	mu   sync.Mutex
	used int64
	wake chan struct{} // closed and replaced at every release
}

func newInflight(limit int64) *inflight {
	return &inflight{max: limit, wake: make(chan struct{})}
}

// acquire reserves n bytes (at most the bound: one request always fits on
// its own), waiting until they fit, ctx ends or wait passes.
func (l *inflight) acquire(ctx context.Context, n int64, wait time.Duration) error {
	n = min(n, l.max)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if l.used+n <= l.max {
			l.used += n
			l.mu.Unlock()
			return nil
		}
		woken, used := l.wake, l.used
		l.mu.Unlock()
		select {
		case <-woken:
		case <-ctx.Done():
			return fmt.Errorf("%w: write abandoned while waiting for memory: %w", models.ErrUnavailable, ctx.Err())
		case <-timer.C:
			return fmt.Errorf("%w: %d bytes of writes already in flight on this node (--write-max-inflight-bytes %d); retry",
				models.ErrUnavailable, used, l.max)
		}
	}
}

func (l *inflight) release(n int64) {
	n = min(n, l.max)
	l.mu.Lock()
	l.used -= n
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

// writeCharge is what a write request is counted for before its body is
// read: its length, or limit when unknown; a gzip body may inflate, up to
// limit, so it counts 8x its length.
func writeCharge(r *http.Request, limit int64) int64 {
	n := r.ContentLength
	if n < 0 {
		return limit
	}
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip") {
		n *= 8
	}
	return min(n, limit)
}
