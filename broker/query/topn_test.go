package query

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTopBottom: the N best points at their own times, in time order, per
// GROUP BY time interval; with a tag key, the best point of each value.
func TestTopBottom(t *testing.T) {
	src := twoFields()
	const span = " AND time >= 0 AND time < 10s"
	for q, want := range map[string][][]any{
		"SELECT top(v, 2) FROM m WHERE host = 'a'" + span:                         {{int64(5e9), 50.0}, {int64(6e9), 60.0}},
		"SELECT bottom(w, 2) FROM m WHERE host = 'a'" + span:                      {{int64(5e9), 95.0}, {int64(6e9), 94.0}},
		"SELECT top(v, host, 1) FROM m WHERE time >= 0 AND time < 10s":            {{int64(6e9), 61.0, "b"}},
		"SELECT bottom(v, host, 5) FROM m WHERE time >= 0 AND time < 10s":         {{int64(1e9), 10.0, "a"}, {int64(1e9), 11.0, "b"}},
		"SELECT top(w, 1) FROM m WHERE host = 'b'" + span + " GROUP BY time(3s)":  {{int64(1e9), 99.0}, {int64(3e9), 97.0}, {int64(6e9), 94.0}},
		"SELECT top(w, 3) FROM m WHERE host = 'b'" + span + " ORDER BY time DESC": {{int64(3e9), 97.0}, {int64(2e9), 98.0}, {int64(1e9), 99.0}},
	} {
		var got [][]any
		for _, r := range runOne(t, src, q) {
			got = append(got, r.AnyValues()...)
		}
		require.Equal(t, want, got, q)
	}
	for q, want := range map[string]error{
		"SELECT top(v) FROM m":            ErrBadQuery,
		"SELECT top(v, 0) FROM m":         ErrBadQuery,
		"SELECT top(v, 1.5) FROM m":       ErrBadQuery,
		"SELECT top(v, 5) FROM m LIMIT 2": ErrBadQuery,
		"SELECT top(v, 2), max(w) FROM m": ErrUnsupported,
	} {
		_, err := plan(t, q, time.Unix(100, 0))
		require.ErrorIs(t, err, want, q)
	}
}

// TestPercentileTime: percentile() alone without GROUP BY time reports the
// selected point's time; with GROUP BY time, the interval's.
func TestPercentileTime(t *testing.T) {
	src := twoFields()
	const span = " AND time >= 0 AND time < 10s"
	for q, want := range map[string][][]any{
		"SELECT percentile(v, 50) FROM m WHERE host = 'a'" + span:                        {{int64(3e9), 30.0}},
		"SELECT percentile(w, 100) FROM m WHERE host = 'b'" + span:                       {{int64(1e9), 99.0}},
		"SELECT percentile(w, 0) FROM m WHERE host = 'b'" + span:                         nil,
		"SELECT percentile(v, 50) FROM m WHERE host = 'a'" + span + " GROUP BY time(1m)": {{int64(0), 30.0}},
	} {
		var got [][]any
		for _, r := range runOne(t, src, q) {
			got = append(got, r.AnyValues()...)
		}
		require.Equal(t, want, got, q)
	}
}
