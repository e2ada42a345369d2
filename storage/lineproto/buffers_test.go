package lineproto

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseIntoBuffers: a batch parsed into Buffers is the batch parsed
// into new memory, whatever the Buffers held before (a larger batch, a
// body parsed twice over, a failed parse), and the next batch reuses its
// memory.
func TestParseIntoBuffers(t *testing.T) {
	body := func(lines int, extra string) []byte {
		var b strings.Builder
		for i := range lines {
			fmt.Fprintf(&b, "cpu,host=h%d,region=r%d,dc=d%d%s v=%d,w=2 %d\n", i, i/100, i%3, extra, i, i)
		}
		return []byte(b.String())
	}
	var into Buffers
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"plain", body(3000, "")},
		{"smaller", body(10, "")},
		{"escapes, whole body decoder", body(700, `,t=a\ b`)},
		{"bad line, line by line", append(body(600, ""), "cpu v=\n"...)},
		{"plain again", body(2000, "")},
	} {
		want, err := ParseBatch(tc.body, Options{})
		require.NoError(t, err, tc.name)
		got, err := ParseBatch(tc.body, Options{Into: &into})
		require.NoError(t, err, tc.name)
		require.Equal(t, want, got, tc.name)
		into.Reset()
		require.Empty(t, into.points, tc.name)
		require.Zero(t, into.used, tc.name)
	}
	// A failed parse (too many points) leaves its memory to the next.
	_, err := ParseBatch(body(100, ""), Options{Into: &into, MaxPoints: 50})
	require.ErrorIs(t, err, ErrTooManyPoints)
	require.Positive(t, cap(into.points))
	into.Reset()

	b := body(3000, "")
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := ParseBatch(b, Options{Into: &into, Given: true}); err != nil {
			t.Fatal(err)
		}
		into.Reset()
	})
	fresh := testing.AllocsPerRun(20, func() {
		if _, err := ParseBatch(b, Options{Given: true}); err != nil {
			t.Fatal(err)
		}
	})
	require.Less(t, allocs, fresh-10, "points and tag slabs reused")
}
