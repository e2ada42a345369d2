package lineproto

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseBatchDropsBadLines: every good line's points are kept, in order;
// the bad lines are counted and the first is named with InfluxDB's wording.
func TestParseBatchDropsBadLines(t *testing.T) {
	var body strings.Builder
	bad := map[int]string{10: "cpu v=", 500: "bad", 998: "cpu,a=1,a=2 v=1 1"}
	for i := 1; i <= 1000; i++ {
		if l, ok := bad[i]; ok {
			body.WriteString(l + "\n")
			continue
		}
		fmt.Fprintf(&body, "cpu,host=h%d v=%d,w=1 %d\n", i%7, i, i)
	}
	b, err := ParseBatch([]byte(body.String()), Options{})
	require.NoError(t, err)
	require.Len(t, b.Points, 997*2)
	require.Equal(t, 3, b.Dropped)
	require.Equal(t, 10, b.First.Line)
	require.Equal(t, "cpu v=", b.First.Text)
	require.True(t, strings.HasPrefix(b.First.Reason(), "unable to parse 'cpu v=': "), b.First.Reason())
	for i, p := range b.Points {
		require.NotEqual(t, 10, p.TS)
		require.NotEqual(t, 500, p.TS)
		if i > 0 {
			require.LessOrEqual(t, b.Points[i-1].TS, p.TS)
		}
	}
}

// TestParseBatchTakesBackHalfParsedLine: a line whose third field is bad
// leaves none of its fields behind.
func TestParseBatchTakesBackHalfParsedLine(t *testing.T) {
	b, err := ParseBatch([]byte("a v=1 1\nb x=1,y=2,z=1.2.3 2\nc v=3 3"), Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, []string{b.Points[0].Metric, b.Points[1].Metric})
	require.Len(t, b.Points, 2)
	require.Equal(t, 1, b.Dropped)
	require.Equal(t, 2, b.First.Line)
}

// TestParseBatchLimits: each limit drops the line over it, and only it,
// naming the limit; the long line is quoted cut.
func TestParseBatchLimits(t *testing.T) {
	lim := Limits{SeriesKeyBytes: 100, TagValueBytes: 40, NameBytes: 20, Tags: 3}
	long := strings.Repeat("x", 41)
	tests := []struct {
		line, limit string
	}{
		{"cpu,host=" + long + " v=1 1", "write-max-tag-value-bytes"},
		{strings.Repeat("m", 21) + " v=1 1", "write-max-name-bytes"},
		{"cpu," + strings.Repeat("k", 21) + "=1 v=1 1", "write-max-name-bytes"},
		{"cpu " + strings.Repeat("f", 21) + "=1 1", "write-max-name-bytes"},
		{"cpu,a=1,b=2,c=3,d=4 v=1 1", "write-max-tags"},
		// 3 tags of 30 bytes: under every other limit, but the key is over.
		{"cpu,a=" + strings.Repeat("1", 30) + ",b=" + strings.Repeat("2", 30) + ",c=" + strings.Repeat("3", 30) + " v=1 1", "write-max-series-key-bytes"},
		// Escapes count: 2 tags of 25 commas are 50 bytes each escaped.
		{`cpu,a=` + strings.Repeat(`\,`, 25) + `,b=` + strings.Repeat(`\,`, 25) + " v=1 1", "write-max-series-key-bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.limit, func(t *testing.T) {
			b, err := ParseBatch([]byte("ok v=1 1\n"+tc.line+"\nok v=2 2"), Options{Limits: lim})
			require.NoError(t, err)
			require.Len(t, b.Points, 2)
			require.Equal(t, 1, b.Dropped)
			require.ErrorIs(t, b.First, ErrLimit)
			require.Contains(t, b.First.Reason(), tc.limit)
			// Under no limits, the same line is good.
			b, err = ParseBatch([]byte(tc.line), Options{})
			require.NoError(t, err)
			require.Zero(t, b.Dropped)
		})
	}
	huge := "cpu,host=" + strings.Repeat("y", 10<<20) + " v=1 1"
	b, err := ParseBatch([]byte(huge+"\nok v=1 1"), Options{Limits: lim})
	require.NoError(t, err)
	require.Len(t, b.Points, 1)
	require.Equal(t, maxQuoted+3, len(b.First.Text))
}

// TestParseBatchCheck: Check's refusal drops the line with its own message.
func TestParseBatchCheck(t *testing.T) {
	old := errors.New("points beyond retention policy")
	b, err := ParseBatch([]byte("a v=1,w=2 5\na v=1 50\na v=1 6"), Options{Check: func(p *Point) error {
		if p.TS > 10 {
			return old
		}
		return nil
	}})
	require.NoError(t, err)
	require.Len(t, b.Points, 3)
	require.Equal(t, 1, b.Dropped)
	require.Equal(t, "points beyond retention policy", b.First.Reason())
	require.ErrorIs(t, b.First, old)
}
