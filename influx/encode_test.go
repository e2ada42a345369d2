package influx

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/cairn-db/cairn/query"
	"github.com/stretchr/testify/require"
)

// TestEncodeAggregateRows: unboxed aggregate rows encode exactly as their
// boxed values would (null, NaN, integers, times in each epoch), and a
// result large enough to be encoded in parallel parts is the same bytes as
// the serial encoding, in order.
func TestEncodeAggregateRows(t *testing.T) {
	row := query.Row{Name: "cpu", Tags: map[string]string{"host": "a"}, Columns: []string{"time", "mean", "count"},
		Times: []int64{-1, 0, 1_500_000_000},
		Cells: [][]query.Cell{
			{{Kind: query.CellFloat, F: 1.5}, {}, {Kind: query.CellFloat, F: math.NaN()}},
			{{Kind: query.CellInt, I: 3}, {Kind: query.CellInt}, {Kind: query.CellInt, I: -2}},
		}}
	boxed := row
	boxed.Times, boxed.Cells, boxed.Values = nil, nil, row.AnyValues()
	for _, unit := range []int64{0, 1, 1e6, 1e9} {
		require.Equal(t, string(appendRow(nil, boxed, unit)), string(appendRow(nil, row, unit)), "epoch %d", unit)
	}
	require.JSONEq(t, `{"name":"cpu","tags":{"host":"a"},"columns":["time","mean","count"],"values":[[-1,1.5,3],[0,null,0],[1,null,-2]]}`,
		string(appendRow(nil, row, 1e9)))

	var rows []query.Row
	for g := range 400 {
		r := query.Row{Name: "m", Tags: map[string]string{"g": fmt.Sprint(g)}, Columns: []string{"time", "sum"}}
		for k := range 300 {
			r.Times = append(r.Times, int64(k)*60e9)
		}
		col := make([]query.Cell, 300)
		for k := range col {
			col[k] = query.Cell{Kind: query.CellFloat, F: float64(g*1000+k) / 7}
		}
		r.Cells = [][]query.Cell{col}
		rows = append(rows, r)
	}
	var serial []byte
	for j, r := range rows {
		if j > 0 {
			serial = append(serial, ',')
		}
		serial = appendRow(serial, r, 1e6)
	}
	require.Greater(t, 400*300, parallelRows, "the result is large enough to be split")
	got := appendRows(nil, rows, 1e6)
	require.Equal(t, string(serial), string(got))
	var back []map[string]any
	require.NoError(t, json.Unmarshal(append(append([]byte{'['}, got...), ']'), &back))
	require.Len(t, back, 400)
}
