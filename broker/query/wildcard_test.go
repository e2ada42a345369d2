package query

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWildcardAggregates: fn(*) and fn(/regex/) become a column per field
// found, in select-list order; count(distinct(f)) counts distinct values.
func TestWildcardAggregates(t *testing.T) {
	src := twoFields()
	const span = " WHERE time >= 0 AND time < 10s"
	for q, want := range map[string]struct {
		cols []string
		vals [][]any
	}{
		"SELECT count(*), max(v) FROM m" + span:       {[]string{"time", "count_v", "count_w", "max"}, [][]any{{int64(0), int64(12), int64(11), 61.0}}},
		"SELECT min(/w/), sum(*) FROM m" + span:       {[]string{"time", "min_w", "sum_v", "sum_w"}, [][]any{{int64(0), 94.0, 426.0, 1061.0}}},
		"SELECT count(distinct(w)) FROM m" + span:     {[]string{"time", "count"}, [][]any{{int64(0), int64(6)}}},
		"SELECT count(distinct(v)) * 2 FROM m" + span: {[]string{"time", "count"}, [][]any{{int64(0), int64(24)}}},
	} {
		rows := runOne(t, src, q)
		require.Len(t, rows, 1, q)
		require.Equal(t, want.cols, rows[0].Columns, q)
		require.Equal(t, want.vals, rows[0].AnyValues(), q)
	}
	for _, q := range []string{"SELECT derivative(mean(*)) FROM m" + span + " GROUP BY time(1s)", "SELECT count(distinct(v), 2) FROM m", "SELECT mean(distinct(v)) FROM m"} {
		_, err := plan(t, q, time.Unix(100, 0))
		require.Error(t, err, q)
	}
}
