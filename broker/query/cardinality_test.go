package query

import (
	"testing"
	"time"

	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

// TestCardinality: SHOW SERIES / MEASUREMENT CARDINALITY over the whole
// database is one "cardinality estimation"; EXACT, FROM or WHERE count per
// measurement (series) or the matching measurements; a series counts once
// however many fields it has.
func TestCardinality(t *testing.T) {
	series, err := ParseSeries([]string{"cpu,host=a#v", "cpu,host=a#w", "cpu,host=b#v", "mem,host=a#u", "disk#f"})
	require.NoError(t, err)
	for q, want := range map[string][]Row{
		"SHOW SERIES CARDINALITY":                             {{Columns: []string{"cardinality estimation"}, Values: [][]any{{int64(4)}}}},
		"SHOW SERIES EXACT CARDINALITY":                       {{Name: "cpu", Columns: []string{"count"}, Values: [][]any{{int64(2)}}}, {Name: "disk", Columns: []string{"count"}, Values: [][]any{{int64(1)}}}, {Name: "mem", Columns: []string{"count"}, Values: [][]any{{int64(1)}}}},
		"SHOW SERIES CARDINALITY WHERE host = 'a'":            {{Name: "cpu", Columns: []string{"count"}, Values: [][]any{{int64(1)}}}, {Name: "mem", Columns: []string{"count"}, Values: [][]any{{int64(1)}}}},
		"SHOW MEASUREMENT CARDINALITY":                        {{Columns: []string{"cardinality estimation"}, Values: [][]any{{int64(3)}}}},
		"SHOW MEASUREMENT CARDINALITY FROM /m/":               {{Columns: []string{"count"}, Values: [][]any{{int64(1)}}}},
		"SHOW MEASUREMENT EXACT CARDINALITY WHERE host = 'z'": nil,
	} {
		stmt, err := influxql.ParseStatement(q)
		require.NoError(t, err, q)
		p, err := PlanShow(stmt, time.Unix(0, 0))
		require.NoError(t, err, q)
		require.Equal(t, want, p.Run(series, nil), q)
	}
	stmt, err := influxql.ParseStatement("SHOW SERIES CARDINALITY GROUP BY host")
	require.NoError(t, err)
	_, err = PlanShow(stmt, time.Unix(0, 0))
	require.ErrorIs(t, err, ErrUnsupported)
}
