package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/stretchr/testify/require"
)

func TestSchedule(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		min, max time.Duration
		rand     float64
		want     []time.Duration
	}{
		{"no jitter drawn: half steps", 100 * ms, 800 * ms, 0, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 400 * ms}},
		{"jitter at its top: full steps", 100 * ms, 800 * ms, 0.999999, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 800 * ms}},
		{"in the middle", 100 * ms, 400 * ms, 0.5, []time.Duration{75 * ms, 150 * ms, 300 * ms, 300 * ms}},
		{"max below min is min", 100 * ms, 10 * ms, 0, []time.Duration{50 * ms, 50 * ms}},
		{"zero min is 1ms", 0, 4 * ms, 0, []time.Duration{ms / 2, ms, 2 * ms, 2 * ms}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := backoff.New(c.min, c.max).WithRand(func() float64 { return c.rand })
			var got []time.Duration
			for range c.want {
				got = append(got, b.Next().Round(time.Microsecond))
			}
			require.Equal(t, c.want, got)
		})
	}
}

func TestReset(t *testing.T) {
	b := backoff.New(10*time.Millisecond, time.Second).WithRand(func() float64 { return 0 })
	for range 5 {
		b.Next()
	}
	b.Reset()
	require.Equal(t, 5*time.Millisecond, b.Next())
}

// TestJitterSpreads: with the real source, waits of one step differ and stay
// within [step/2, step].
func TestJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		d := backoff.New(time.Second, time.Second).Next()
		require.GreaterOrEqual(t, d, 500*time.Millisecond)
		require.LessOrEqual(t, d, time.Second)
		seen[d] = true
	}
	require.Greater(t, len(seen), 1, "jitter draws different waits")
}

func TestWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, backoff.New(time.Hour, time.Hour).Wait(ctx))
	require.True(t, backoff.New(time.Microsecond, time.Microsecond).Wait(context.Background()))
}
