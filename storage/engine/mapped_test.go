package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlushSlotsBoundConcurrentFlushes: past the engine's flush slots a
// flush waits until one is released.
func TestFlushSlotsBoundConcurrentFlushes(t *testing.T) {
	f := &flushSlots{ch: make(chan struct{}, 1)}
	release := f.take()
	got := make(chan func())
	go func() { got <- f.take() }()
	select {
	case <-got:
		t.Fatal("a second flush got a slot while the only one was taken")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	second := <-got
	second()
	require.Empty(t, f.ch)
	var d flushSlots
	d.take()()
	require.GreaterOrEqual(t, cap(d.ch), 2, "a waiting commit's flush never queues behind all the others")
	require.LessOrEqual(t, cap(d.ch), 4)
}
