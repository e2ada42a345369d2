// Package backoff spaces the retries of a failing loop: waits grow
// exponentially from Min to Max and are jittered, so that processes that
// failed together (an etcd restart, a dead leader) do not retry in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is one loop's retry schedule. It is not safe for concurrent use:
// each loop owns its own.
type Backoff struct {
	min, max time.Duration
	next     time.Duration
	// rand returns a number in [0, 1); tests fix it.
	rand func() float64
}

// New returns a schedule whose first wait is about lo and whose waits never
// exceed hi. lo <= 0 is taken as 1ms, hi < lo as lo.
func New(lo, hi time.Duration) *Backoff {
	if lo <= 0 {
		lo = time.Millisecond
	}
	return &Backoff{min: lo, max: max(lo, hi), next: lo, rand: rand.Float64}
}

// WithRand replaces the jitter source (a function returning [0, 1)), for
// tests that need exact waits.
func (b *Backoff) WithRand(r func() float64) *Backoff {
	b.rand = r
	return b
}

// Next returns the wait before the next attempt, uniformly drawn from the
// upper half of the current step ("equal jitter": never less than half the
// step, so a hot loop stays slowed), and doubles the step up to max.
func (b *Backoff) Next() time.Duration {
	step := b.next
	b.next = min(2*b.next, b.max)
	half := step / 2
	return half + time.Duration(b.rand()*float64(step-half))
}

// Reset starts the schedule over after a success.
func (b *Backoff) Reset() { b.next = b.min }

// Wait sleeps Next(), or less if ctx ends first; it reports whether the
// caller should go on (false: ctx ended).
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
