package gopool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every function runs exactly once, concurrently when called so; at most
// max goroutines stay idle afterwards, and a later call reuses one of them
// instead of starting another.
func TestPoolRunsEachOnceAndKeepsAtMostMaxIdle(t *testing.T) {
	p := New(4)
	const n = 64
	var ran atomic.Int64
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	done := make(chan struct{}, n)
	for range n {
		p.Go(func() {
			ran.Add(1)
			started.Done()
			release.Wait() // all n run at once: none is reused while busy
			done <- struct{}{}
		})
	}
	started.Wait()
	release.Done()
	for range n {
		<-done
	}
	require.EqualValues(t, n, ran.Load())
	require.Eventually(t, func() bool { return p.idleCount() == 4 }, testWait, testTick,
		"the goroutines beyond max exit; max stay")

	// Sequential calls reuse the idle goroutines: none is started, and the
	// idle count dips and comes back, never above max.
	p.mu.Lock()
	require.Equal(t, n, p.started)
	p.mu.Unlock()
	for range 100 {
		ch := make(chan struct{})
		p.Go(func() { close(ch) })
		<-ch
		require.LessOrEqual(t, p.idleCount(), 4)
	}
	p.mu.Lock()
	require.Equal(t, n, p.started, "no goroutine started for the sequential calls")
	p.mu.Unlock()
	require.Eventually(t, func() bool { return p.idleCount() == 4 }, testWait, testTick)
}

// A zero-max pool keeps nothing: every goroutine exits after its call.
func TestZeroPoolKeepsNoGoroutine(t *testing.T) {
	p := New(0)
	ch := make(chan struct{})
	p.Go(func() { close(ch) })
	<-ch
	require.Never(t, func() bool { return p.idleCount() != 0 }, testTick*5, testTick)
}

const (
	testWait = 5 * time.Second
	testTick = 10 * time.Millisecond
)
