package query

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMeasurements(t *testing.T) {
	now := time.Unix(100, 0)
	for q, want := range map[string][]string{
		"SELECT v FROM m":              {"m"},
		"SELECT v FROM m, a":           {"a", "m"},
		"SELECT v FROM /^c/, mem, cpu": {"cpu", "cx", "mem"},
		"SELECT v FROM /nothing/":      nil,
	} {
		p, err := plan(t, q, now)
		require.NoError(t, err, q)
		got, err := p.Measurements([]string{"cpu", "cx", "disk", "mem"})
		require.NoError(t, err, q)
		require.Equal(t, want, got, q)
		require.Equal(t, strings.Contains(q, "/"), p.NeedsMeasurements(), q)
	}
	p, err := plan(t, "SELECT v FROM /./", now)
	require.NoError(t, err)
	many := make([]string, MaxSources+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	_, err = p.Measurements(many)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = plan(t, `SELECT v FROM a."autogen".m, b."autogen".n`, now)
	require.ErrorIs(t, err, ErrUnsupported)
}

// TestCombine: each measurement's statement reads it alone; the answers
// follow in measurement order (reversed with ORDER BY time DESC) and SELECT *
// gets the union of the columns.
func TestCombine(t *testing.T) {
	src := twoFields()
	for i := range src[2:] { // host b's series become measurement n
		src[2+i].Metric = "n"
	}
	p, err := plan(t, "SELECT * FROM m, n WHERE v > 55 AND time >= 0 AND time < 10s ORDER BY time DESC", time.Unix(100, 0))
	require.NoError(t, err)
	names, err := p.Measurements(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"m", "n"}, names)
	var per [][]Row
	for _, m := range names {
		one := p.For(m)
		require.Equal(t, m, one.Req.Measurement)
		require.Equal(t, m, one.Local.Measurement)
		per = append(per, evalShards(t, one, src))
	}
	rows := p.Combine(per)
	require.Len(t, rows, 2)
	require.Equal(t, "n", rows[0].Name)
	require.Equal(t, []string{"time", "host", "v", "w"}, rows[0].Columns)
	require.Equal(t, [][]any{{int64(6e9), "b", 61.0, 94.0}}, rows[0].Values)
	require.Equal(t, [][]any{{int64(6e9), "a", 60.0, 94.0}}, rows[1].Values)
}
