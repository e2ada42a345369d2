package web

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
)

// inflight bounds the write body bytes a node holds at once, over every
// write endpoint: a parsed batch, split per shard and encoded for the log,
// holds several times its body, so without a bound many concurrent senders
// could grow a node's memory without limit.
//
// A request is charged as its body arrives, not by the length it declares:
// a client that declares 32 MiB and sends 3 bytes holds 3 bytes, so slow
// senders cannot fill the budget and stall fast ones. A read past the bound
// waits for others to finish, up to a deadline, then fails with 503 (retry).
// Partly read requests could wait on one another forever; the oldest reader
// is therefore never made to wait, which bounds the memory held at the
// budget plus one request's body limit.
type inflight struct {
	max int64

	mu      sync.Mutex
	used    int64
	readers list.List     // of *meteredBody, oldest first
	wake    chan struct{} // closed and replaced at every release
}

func newInflight(limit int64) *inflight {
	return &inflight{max: limit, wake: make(chan struct{})}
}

// acquire charges n more bytes to reader b, waiting until they fit, ctx
// ends or wait passes.
func (l *inflight) acquire(ctx context.Context, b *meteredBody, n int64, wait time.Duration) error {
	var timer *time.Timer
	for {
		l.mu.Lock()
		if l.used+n <= l.max || l.readers.Front() == b.elem {
			l.used += n
			b.held += n
			l.mu.Unlock()
			return nil
		}
		woken, used := l.wake, l.used
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
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

// register adds a reader at the back of the line.
func (l *inflight) register(b *meteredBody) {
	l.mu.Lock()
	b.elem = l.readers.PushBack(b)
	l.mu.Unlock()
}

// release returns everything b holds and takes it out of the line.
func (l *inflight) release(b *meteredBody) {
	l.mu.Lock()
	l.used -= b.held
	b.held = 0
	l.readers.Remove(b.elem)
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

// meteredBody is a write body that charges the in-flight budget for the
// bytes it has delivered, and turns a missed read deadline into a clear
// error.
type meteredBody struct {
	io.ReadCloser
	ctx     context.Context
	l       *inflight // nil: no budget, only the deadline
	wait    time.Duration
	factor  int64 // what one wire byte may grow into (gzip: 8)
	limit   int64 // the most one request is charged
	timeout time.Duration
	read    int64
	held    int64 // guarded by l.mu
	elem    *list.Element
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.l != nil {
		b.read += int64(n)
		want := min(b.read*b.factor, b.limit)
		b.l.mu.Lock()
		more := want - b.held
		b.l.mu.Unlock()
		if more > 0 {
			if aerr := b.l.acquire(b.ctx, b, more, b.wait); aerr != nil {
				return 0, aerr
			}
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: write body not received within %s (--write-body-timeout): send faster or smaller batches", models.ErrBadInput, b.timeout)
	}
	return n, err
}

// meterWrite wraps a write request's body: its read deadline, and its
// charge against the in-flight budget. The returned func releases the
// charge once the handler is done.
func (s *Server) meterWrite(w http.ResponseWriter, r *http.Request, limit int64) func() {
	b := &meteredBody{ReadCloser: r.Body, ctx: r.Context(), l: s.writes, wait: s.cfg.WriteInflightWait,
		factor: 1, limit: limit, timeout: s.cfg.WriteBodyTimeout}
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip") {
		b.factor = 8 // a gzip body inflates, up to limit, once decoded
	}
	if s.cfg.WriteBodyTimeout > 0 {
		// The connection's deadline: a sender that trickles its body loses
		// its request (and the connection) instead of holding a slot.
		// Recorders in tests do not support it, which is harmless.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.WriteBodyTimeout))
	}
	r.Body = b
	if b.l == nil {
		return func() {}
	}
	if b.limit > b.l.max {
		b.limit = b.l.max
	}
	b.l.register(b)
	return func() { b.l.release(b) }
}
