package query

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTransformApply: each transformation over a filled column, with a
// null bucket skipped and the rows before from dropped (the extra bucket
// read before the query's start).
func TestTransformApply(t *testing.T) {
	times := []int64{0, 60e9, 120e9, 180e9, 240e9}
	f := func(v float64) Cell { return floatCell(v) }
	i := func(v int64) Cell { return Cell{Kind: CellInt, I: v} }
	floats := []Cell{f(10), f(16), {}, f(4), f(7)}
	ints := []Cell{i(10), i(16), {}, i(4), i(7)}
	for _, tc := range []struct {
		tr       Transform
		col      []Cell
		from     int64
		wantT    []int64
		wantCell []Cell
	}{
		{Transform{Name: "derivative", Unit: 1e9}, floats, 0, []int64{60e9, 180e9, 240e9}, []Cell{f(0.1), f(-0.1), f(0.05)}},
		{Transform{Name: "derivative", Unit: 60e9}, floats, 60e9, []int64{60e9, 180e9, 240e9}, []Cell{f(6), f(-6), f(3)}},
		{Transform{Name: "derivative", Unit: 60e9}, floats, 120e9, []int64{180e9, 240e9}, []Cell{f(-6), f(3)}},
		{Transform{Name: "non_negative_derivative", Unit: 60e9}, ints, 0, []int64{60e9, 240e9}, []Cell{f(6), f(3)}},
		{Transform{Name: "difference"}, ints, 0, []int64{60e9, 180e9, 240e9}, []Cell{i(6), i(-12), i(3)}},
		{Transform{Name: "non_negative_difference"}, floats, 0, []int64{60e9, 240e9}, []Cell{f(6), f(3)}},
		{Transform{Name: "cumulative_sum"}, ints, 0, []int64{0, 60e9, 180e9, 240e9}, []Cell{i(10), i(26), i(30), i(37)}},
		{Transform{Name: "moving_average", N: 2}, floats, 0, []int64{60e9, 180e9, 240e9}, []Cell{f(13), f(10), f(5.5)}},
		{Transform{Name: "elapsed", Unit: int64(time.Minute)}, floats, 0, []int64{60e9, 180e9, 240e9}, []Cell{i(1), i(2), i(1)}},
	} {
		gotT, gotC := tc.tr.apply(times, tc.col, tc.from)
		require.Equal(t, tc.wantT, gotT, tc.tr.Name)
		require.Equal(t, tc.wantCell, gotC, tc.tr.Name)
	}
}

// TestPlanTransforms: a transformation reads one bucket before the start
// and answers from the start's bucket; the shapes it does not take are
// refused naming why.
func TestPlanTransforms(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, err := plan(t, "SELECT derivative(mean(v), 1s) FROM m WHERE time >= 600s AND time < 1200s GROUP BY time(1m)", now)
	require.NoError(t, err)
	require.Equal(t, int64(540e9), p.Req.Start)
	require.Equal(t, int64(600e9), p.From)
	require.Equal(t, &Transform{Name: "derivative", Unit: 1e9}, p.Outputs[0].Transform)
	require.Equal(t, "mean", p.Outputs[0].Func)
	p, err = plan(t, "SELECT non_negative_derivative(max(c)) FROM m WHERE time >= 1699990000s GROUP BY time(5m)", now)
	require.NoError(t, err)
	require.Equal(t, int64(300e9), p.Outputs[0].Transform.Unit, "the GROUP BY interval by default")
	for q, want := range map[string]error{
		"SELECT derivative(v) FROM m WHERE time > 0 GROUP BY time(1m)":                                    ErrBadQuery,
		"SELECT derivative(v + 1) FROM m":                                                                 ErrUnsupported,
		"SELECT derivative(mean(v)) FROM m WHERE time > 0":                                                ErrBadQuery,
		"SELECT derivative(mean(v), 5) FROM m WHERE time > 1699990000s GROUP BY time(1m)":                 ErrBadQuery,
		"SELECT moving_average(mean(v), 1) FROM m WHERE time > 1699990000s GROUP BY time(1m)":             ErrBadQuery,
		"SELECT derivative(mean(v)), max(v) FROM m WHERE time > 1699990000s GROUP BY time(1m)":            ErrUnsupported,
		"SELECT difference(mean(v)) FROM m WHERE time > 1699990000s GROUP BY time(1m) ORDER BY time DESC": ErrUnsupported,
	} {
		_, err := plan(t, q, now)
		require.ErrorIs(t, err, want, q)
	}
}

// TestMath: arithmetic over one aggregate as InfluxDB computes it, and the
// expressions it does not take.
func TestMath(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, err := plan(t, "SELECT (count(v) - 1) * 2, count(v) / 4, mean(v) / 0 FROM m WHERE time > 1699990000s", now)
	require.NoError(t, err)
	require.Equal(t, Cell{Kind: CellInt, I: 18}, evalMath(p.Outputs[0].Math, Cell{Kind: CellInt, I: 10}))
	require.Equal(t, floatCell(2.5), evalMath(p.Outputs[1].Math, Cell{Kind: CellInt, I: 10}))
	require.Equal(t, floatCell(0), evalMath(p.Outputs[2].Math, floatCell(3)))
	require.Equal(t, Cell{}, evalMath(p.Outputs[0].Math, Cell{}), "null stays null")
	require.Equal(t, "count", p.Outputs[0].Func)
	for _, q := range []string{"SELECT mean(v) + max(v) FROM m", "SELECT v * 2 FROM m", "SELECT mean(v) % 2 FROM m"} {
		_, err := plan(t, q, now)
		require.ErrorIs(t, err, ErrUnsupported, q)
	}
}

// TestRawTransforms: a transformation over a raw field runs over each
// series' points in time order (a derivative's unit 1s by default), before
// LIMIT.
func TestRawTransforms(t *testing.T) {
	src := twoFields()
	const span = " WHERE host = 'a' AND time >= 0 AND time < 10s"
	for q, want := range map[string][][]any{
		"SELECT derivative(v) FROM m" + span:                                     {{int64(2e9), 10.0}, {int64(3e9), 10.0}, {int64(4e9), 10.0}, {int64(5e9), 10.0}, {int64(6e9), 10.0}},
		"SELECT difference(w) FROM m" + span + " LIMIT 2":                        {{int64(2e9), -1.0}, {int64(4e9), -2.0}},
		"SELECT non_negative_derivative(w, 2s) FROM m" + span:                    nil,
		"SELECT cumulative_sum(v) FROM m" + span + " ORDER BY time DESC LIMIT 2": {{int64(6e9), 60.0}, {int64(5e9), 110.0}},
		"SELECT elapsed(w, 1s) FROM m" + span:                                    {{int64(2e9), int64(1)}, {int64(4e9), int64(2)}, {int64(5e9), int64(1)}, {int64(6e9), int64(1)}},
	} {
		var got [][]any
		for _, r := range runOne(t, src, q) {
			got = append(got, r.AnyValues()...)
		}
		require.Equal(t, want, got, q)
	}
}
