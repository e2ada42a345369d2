// Package gopool runs functions in goroutines kept between calls.
//
// A goroutine starts with a small stack and grows it, by copying, the
// first time a call goes deep; the write path's goroutines (a broker's
// write to each shard, a shard's committer, the log writer) go deep every
// time, and a fresh goroutine per batch and shard paid that copy every
// time: at 32 shards runtime.newstack and copystack were 5 % of a write's
// CPU. A kept goroutine has grown already (the collector may shrink an idle
// one's stack again, so it grows once per collection at most instead of
// once per call). Idle goroutines wait for work as long as the process
// lives, at most max of them per pool.
package gopool

import "sync"

// Pool keeps up to max idle goroutines; the zero Pool keeps none.
type Pool struct {
	mu      sync.Mutex
	idle    []chan func() // LIFO: the goroutine that ran last is the warmest
	max     int
	started int // goroutines started, for the tests
}

// New returns a pool keeping at most maxIdle idle goroutines. More may run
// at once; those finding the pool full when they finish exit.
func New(maxIdle int) *Pool { return &Pool{max: maxIdle} }

// Go runs f in an idle goroutine of the pool, or in a new one.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		ch := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		ch <- f // buffered: never blocks
		return
	}
	p.started++
	p.mu.Unlock()
	go p.work(make(chan func(), 1), f)
}

func (p *Pool) work(ch chan func(), f func()) {
	for {
		f()
		f = nil // nothing of the last call stays reachable while idle
		p.mu.Lock()
		if len(p.idle) >= p.max {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
		f = <-ch
	}
}

// idleCount is how many goroutines wait for work.
func (p *Pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
