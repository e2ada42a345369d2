package engine

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAppendSeriesJSONMatchesEncodingJSON(t *testing.T) {
	series := []Series{
		{Metric: "cpu", Tags: map[string]string{"host": "a\"b", "z": "1", "_field": "usr"}, Points: []SeriesPoint{{TS: 1, Value: 0.5}, {TS: -2, Value: 1e300}, {TS: 3, Value: math.NaN()}}},
		{Metric: "m<é>", Tags: map[string]string{}, Points: []SeriesPoint{}},
	}
	want, err := json.Marshal(series)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(AppendSeriesJSON(nil, series)))
	require.Equal(t, "[]", string(AppendSeriesJSON(nil, nil)))
}
