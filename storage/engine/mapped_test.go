package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlushSlotsBoundConcurrentFlushes: past the engine's flush slots a
// flush waits until one is released.
func TestFlushSlotsBoundConcurrentFlushes(t *testing.T) {
	b := &memBudget{flushes: make(chan struct{}, 1)}
	release := b.flushSlot()
	got := make(chan func())
	go func() { got <- b.flushSlot() }()
	select {
	case <-got:
		t.Fatal("a second flush got a slot while the only one was taken")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	second := <-got
	second()
	require.Equal(t, 0, len(b.flushes))
	require.GreaterOrEqual(t, flushSlots(), 1)
	require.LessOrEqual(t, flushSlots(), 4)
}
