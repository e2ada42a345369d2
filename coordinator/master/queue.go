package master

import (
	"maps"
	"slices"
	"time"
)

// workQueue holds the databases the master must reconcile, deduplicated, with
// a retry schedule per database (client-go's rate-limited work queue, for one
// worker): a database that fails waits out its own exponential back-off with
// jitter while every other database is still served at once. It reads no
// clock: callers pass now.
type workQueue struct {
	base, max time.Duration
	jitter    func() float64 // in [0, 1)
	due       map[string]bool
	retry     map[string]retryState
}

type retryState struct {
	failures int
	at       time.Time // not before
}

func newWorkQueue(base, max time.Duration, jitter func() float64) *workQueue {
	return &workQueue{base: base, max: max, jitter: jitter, due: map[string]bool{}, retry: map[string]retryState{}}
}

// Add marks key for the next pass; a key waiting out a back-off keeps waiting
// (its own trouble must not make it spin).
func (q *workQueue) Add(key string) {
	if _, waiting := q.retry[key]; !waiting {
		q.due[key] = true
	}
}

// Due removes and returns, sorted, the keys to work on at now: those added
// and those whose retry time has come.
func (q *workQueue) Due(now time.Time) []string {
	for k, r := range q.retry {
		if !now.Before(r.at) {
			q.due[k] = true
		}
	}
	out := slices.Sorted(maps.Keys(q.due))
	clear(q.due)
	return out
}

// Failed schedules key again after its back-off: base doubled per failure in
// a row, capped at max, of which a random half is taken off (so keys failing
// together do not retry in lockstep). It returns the delay.
func (q *workQueue) Failed(key string, now time.Time) time.Duration {
	r := q.retry[key]
	r.failures++
	d := q.base
	for i := 1; i < r.failures && d < q.max; i++ {
		d *= 2
	}
	d = min(d, q.max)
	d -= time.Duration(float64(d/2) * q.jitter())
	r.at = now.Add(d)
	q.retry[key] = r
	return d
}

// Forget ends key's back-off after a success.
func (q *workQueue) Forget(key string) { delete(q.retry, key) }

// Failures is how many times in a row key has failed.
func (q *workQueue) Failures(key string) int { return q.retry[key].failures }

// Next is the earliest retry time, if any key waits.
func (q *workQueue) Next() (time.Time, bool) {
	var next time.Time
	for _, r := range q.retry {
		if next.IsZero() || r.at.Before(next) {
			next = r.at
		}
	}
	return next, !next.IsZero()
}
