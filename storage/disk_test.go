package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSteadyPctIgnoresHoveringAtABoundary: a disk hovering at a whole
// percent keeps the percent the record shows; a move of a quarter point past
// it, either way, shows the new one; a used disk never shows 0 (unknown).
func TestSteadyPctIgnoresHoveringAtABoundary(t *testing.T) {
	for _, c := range []struct {
		last int
		f    float64
		want int
	}{
		{0, 76.99, 76},  // first reading
		{76, 77.01, 76}, // hovering just above
		{77, 76.99, 77}, // hovering just below
		{76, 77.25, 77}, // a quarter point into the next
		{77, 76.75, 77}, // at the slack, not past it
		{77, 76.74, 76}, // past it, down
		{76, 80.5, 80},  // a jump
		{76, 0, 0},      // unreadable
		{0, 0.1, 1},     // used but under 1 %
	} {
		require.Equal(t, c.want, steadyPct(c.last, c.f), "last %d, now %.2f", c.last, c.f)
	}
}
