package influx

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cairn-db/cairn/broker/query"
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

	// The whole answer goes out as chunks: the large parts as they are.
	chunks := encodeResults([]result{{id: 0, rows: rows}, {id: 1, err: "nope"}}, 1e6)
	require.Greater(t, len(chunks), 2)
	var answer struct {
		Results []struct {
			StatementID int `json:"statement_id"`
			Error       string
			Series      []json.RawMessage
		}
	}
	require.NoError(t, json.Unmarshal(appendResults(nil, []result{{id: 0, rows: rows}, {id: 1, err: "nope"}}, 1e6), &answer))
	require.Len(t, answer.Results, 2)
	require.Len(t, answer.Results[0].Series, 400)
	require.Equal(t, "nope", answer.Results[1].Error)
	var joined []byte
	for _, c := range chunks {
		joined = append(joined, c...)
	}
	require.Equal(t, string(appendResults(nil, []result{{id: 0, rows: rows}, {id: 1, err: "nope"}}, 1e6)), string(joined))
	require.Contains(t, string(joined), string(serial))
}

// TestAppendFloatMatchesInfluxDB: floats are written as InfluxDB writes
// them (Go's encoding/json: no exponent from 1e-6 to 1e21, so 6248750 and
// not 6.24875e+06), the decimal fast path included, over decimals of every
// scale, their neighbours one ulp away, and arbitrary finite floats.
func TestAppendFloatMatchesInfluxDB(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return // written as null before appendFloat
		}
		want, err := json.Marshal(f)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendFloat(nil, f)), "%v (bits %x)", f, math.Float64bits(f))
	}
	require.Equal(t, "6248750", string(appendFloat(nil, 6248750)))
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.001, -0.001, 0.0001, 0.1 + 0.2, 999999.999, 1e6, 999999.9999,
		123456.5, 1e-3 - 1e-19, 0.005, 10, 100.5, 1234567, math.MaxFloat64, math.SmallestNonzeroFloat64, 2.5e-4,
		1e-6, 9.9e-7, 1e20, 1e21, 123456789012, -6248750.5, 1e-7} {
		check(f)
	}
	for range 200_000 {
		scale := []float64{1, 10, 100, 1000, 1e4}[rng.IntN(5)]
		f := float64(rng.Int64N(2e9)-1e9) / scale
		check(f)
		check(math.Nextafter(f, math.Inf(1)))
		check(math.Nextafter(f, math.Inf(-1)))
		check(math.Float64frombits(rng.Uint64()))
		check(rng.Float64() * 1e6)
	}
}
