package query

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSubquery: the outer statement reads the inner one's result series,
// columns as fields and tags as tags.
func TestSubquery(t *testing.T) {
	src := twoFields()
	const span = " WHERE time >= 0 AND time < 10s"
	for q, want := range map[string][][]any{
		"SELECT max(s) FROM (SELECT sum(v) AS s FROM m" + span + " GROUP BY time(2s), host)":                  {{int64(4e9), 92.0}},
		"SELECT sum(s) FROM (SELECT sum(v) AS s FROM m" + span + " GROUP BY time(2s), host) WHERE host = 'a'": {{int64(0), 210.0}},
		"SELECT count(w) FROM (SELECT w FROM m" + span + ") WHERE w > 96":                                     {{int64(0), int64(5)}},
	} {
		p, err := plan(t, q, time.Unix(100, 0))
		require.NoError(t, err, q)
		require.NotNil(t, p.Sub, q)
		inner := evalShards(t, p.Sub, src)
		rows, err := p.MergeSubquery(inner)
		require.NoError(t, err, q)
		var got [][]any
		for _, r := range rows {
			got = append(got, r.AnyValues()...)
		}
		require.Equal(t, want, got, q)
	}
}
