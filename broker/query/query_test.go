package query

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

func plan(t *testing.T, q string, now time.Time) (*Plan, error) {
	t.Helper()
	stmt, err := influxql.ParseStatement(q)
	require.NoError(t, err, q)
	return PlanSelect(stmt.(*influxql.SelectStatement), now)
}

func TestPlanRefusesUnsupported(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for q, want := range map[string]error{
		"SELECT derivative(v + 1) FROM m":                         ErrUnsupported,
		"SELECT v FROM m WHERE v + 1 > 3":                         ErrUnsupported,
		"SELECT v FROM m WHERE host = 'a' OR time > now() - 1h":   ErrUnsupported,
		"SELECT mean(v) FROM m GROUP BY time(1m)":                 ErrBadQuery,
		"SELECT mean(v), v FROM m":                                ErrUnsupported,
		"SELECT distinct(v), mean(v) FROM m":                      ErrBadQuery,
		"SELECT sample(v, 0) FROM m":                              ErrBadQuery,
		"SELECT distinct(v) FROM m ORDER BY time DESC":            ErrUnsupported,
		"SELECT percentile(v, 101) FROM m":                        ErrBadQuery,
		"SELECT mean(v) FROM (SELECT v FROM (SELECT v FROM m))":   ErrUnsupported,
		"SELECT v INTO x FROM m":                                  ErrUnsupported,
		"SELECT mean(v) FROM m WHERE time > 0 GROUP BY time(1ns)": ErrTooLarge,
		"SELECT v FROM m GROUP BY time(1m)":                       ErrBadQuery,
	} {
		_, err := plan(t, q, now)
		require.ErrorIs(t, err, want, q)
	}
}

func TestSplitTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ns := now.UnixNano()
	for q, want := range map[string][2]int64{
		"SELECT v FROM m WHERE time > now() - 1h":                                    {ns - 3600e9 + 1, math.MaxInt64},
		"SELECT v FROM m WHERE time >= 1700000000000ms and time <= 1700000001000ms":  {1_700_000_000e9, 1_700_000_001e9},
		"SELECT v FROM m WHERE '2023-11-14T22:13:20Z' <= time AND time < now() + 1h": {1_700_000_000e9, ns + 3600e9 - 1},
		"SELECT v FROM m WHERE host = 'a' AND (time = 5)":                            {5, 5},
		"SELECT v FROM m WHERE time > 10 AND time > 20 AND time < 100":               {21, 99},
	} {
		p, err := plan(t, q, now)
		require.NoError(t, err, q)
		require.Equal(t, want, [2]int64{p.Req.Start, p.Req.End}, q)
	}
	p, err := plan(t, "SELECT v FROM m WHERE host = 'a' AND time > 1 AND (region =~ /x/ OR host != 'b')", now)
	require.NoError(t, err)
	require.Equal(t, `host = 'a' AND (region =~ /x/ OR host != 'b')`, p.Req.Cond)
	p, err = plan(t, "SELECT v FROM m WHERE time > 10 AND time < 5", now)
	require.NoError(t, err)
	require.Greater(t, p.Req.Start, p.Req.End, "an empty range stays empty")
}

func TestWireRoundTrip(t *testing.T) {
	all := StatSum | StatMinMax | StatFirst | StatLast | StatM2 | StatValues
	r := &ShardResult{
		Groups: []Group{{Tags: []Tag{{"host", "a"}}, Fields: []FieldBuckets{{Field: "v", First: -60, Step: 30, Parts: []Partial{
			{Count: 2, Sum: 3, X: &Extra{Min: 1, Max: 2, MinTS: -60, MaxTS: -50, First: 1, Last: 2, FirstTS: -60, LastTS: -50, M2: 0.5, Values: []float64{1, 2}}},
			{},
			{Count: 1, Sum: math.Inf(1), X: &Extra{Values: []float64{math.Inf(1)}}},
		}}, {Field: "w", First: 7, Parts: []Partial{{Count: 1, Sum: 2, X: &Extra{Values: []float64{2}}}}}}}},
		Raw: []RawSeries{{Tags: []Tag{{"k", "v=,\x00"}}, Field: "f", TS: []int64{-5, 0, 1 << 62}, Values: []float64{1, math.NaN(), -3}}},
	}
	back, err := UnmarshalResult(MarshalResult(r, all))
	require.NoError(t, err)
	require.Equal(t, r.Groups, back.Groups)
	require.Equal(t, r.Raw[0].TS, back.Raw[0].TS)
	require.True(t, math.IsNaN(back.Raw[0].Values[1]))
	// Only the asked statistics travel.
	back, err = UnmarshalResult(MarshalResult(r, StatSum))
	require.NoError(t, err)
	require.Equal(t, 3.0, back.Groups[0].Fields[0].Parts[0].Sum)
	require.Nil(t, back.Groups[0].Fields[0].Parts[0].X, "no statistic beyond the sum travels")
	require.True(t, math.IsInf(back.Groups[0].Fields[0].At(0).Sum, 1))
	require.Nil(t, back.Groups[0].Fields[0].At(-30), "an empty slot")
	require.Nil(t, back.Groups[0].Fields[0].At(-45), "off the grid")
	require.Nil(t, back.Groups[0].Fields[0].At(30), "past the last slot")
	// A corrupt answer cannot claim more slots than a shard may fill.
	bad := MarshalResult(&ShardResult{Groups: []Group{{Fields: []FieldBuckets{{Field: "v", Step: 1, Parts: make([]Partial, MaxBuckets+1)}}}}}, StatSum)
	_, err = UnmarshalResult(bad)
	require.ErrorIs(t, err, ErrBadWire)
}

// TestMergeFieldBuckets: dense bucket arrays on one grid merge slot by
// slot whatever spans they cover; arrays on different grids are refused.
func TestMergeFieldBuckets(t *testing.T) {
	mk := func(first int64, counts ...int64) FieldBuckets {
		f := FieldBuckets{Field: "v", First: first, Step: 10}
		for _, c := range counts {
			f.Parts = append(f.Parts, Partial{Count: c, Sum: float64(c)})
		}
		return f
	}
	counts := func(f FieldBuckets) (out []int64) {
		for _, p := range f.Parts {
			out = append(out, p.Count)
		}
		return out
	}
	m, err := MergeFieldBuckets(mk(20, 1, 2), mk(0, 5, 0, 3, 4, 0, 7))
	require.NoError(t, err)
	require.Equal(t, int64(0), m.First)
	require.Equal(t, []int64{5, 0, 4, 6, 0, 7}, counts(m))
	m, err = MergeFieldBuckets(mk(0, 1, 1, 1), mk(10, 2))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3, 1}, counts(m))
	m, err = MergeFieldBuckets(FieldBuckets{}, mk(30, 9))
	require.NoError(t, err)
	require.Equal(t, int64(30), m.First)
	_, err = MergeFieldBuckets(mk(0, 1), mk(5, 1))
	require.ErrorIs(t, err, ErrBadWire)
}

func FuzzUnmarshalResult(f *testing.F) {
	f.Add(MarshalResult(&ShardResult{Groups: []Group{{Fields: []FieldBuckets{{Field: "v", First: 1, Step: 5, Parts: []Partial{{Count: 1, X: &Extra{Values: []float64{1}}}, {}}}}}}}, StatValues))
	f.Add([]byte{2, 0, 200, 200, 200, 200, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := UnmarshalResult(data)
		if err != nil {
			require.True(t, errors.Is(err, ErrBadWire))
			return
		}
		require.NotNil(t, r)
	})
}

// TestShardSplitInvariance: however the series are spread over shards, the
// merged partials give the answer of one shard holding them all, for every
// aggregate (integer values keep sums exact; stddev within rounding).
func TestShardSplitInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var series []engine.Series
	for h := range 12 {
		s := engine.Series{Metric: "m", Tags: map[string]string{"host": fmt.Sprintf("h%d", h), "dc": fmt.Sprintf("d%d", h%2), engine.FieldTag: "v"}}
		ts := int64(0)
		for range 300 {
			ts += int64(rng.IntN(40)+1) * 1e9
			s.Points = append(s.Points, engine.SeriesPoint{TS: ts, Value: float64(rng.IntN(50))})
		}
		series = append(series, s)
	}
	now := time.Unix(100000, 0)
	for _, fn := range []string{"mean", "sum", "count", "min", "max", "first", "last", "median", "percentile(v, 75)", "stddev", "spread"} {
		call := fn + "(v)"
		if fn[len(fn)-1] == ')' {
			call = fn
		}
		for _, tail := range []string{"GROUP BY time(5m), dc fill(linear)", "GROUP BY time(7m, 2m) fill(previous)", "GROUP BY *", ""} {
			q := fmt.Sprintf("SELECT %s FROM m WHERE time >= 0 AND time < 9000s %s", call, tail)
			p, err := plan(t, q, now)
			require.NoError(t, err, q)
			run := func(shards int) []Row {
				parts := make([]fakeSource, shards)
				for i, s := range series {
					parts[(i*7)%shards] = append(parts[(i*7)%shards], s)
				}
				return evalShards(t, p, parts...)
			}
			one := run(1)
			require.NotEmpty(t, one, q)
			for _, n := range []int{2, 5, 12} {
				got := run(n)
				require.Equal(t, len(one), len(got), q)
				for i := range one {
					require.Equal(t, one[i].Tags, got[i].Tags, q)
					ov, gv := one[i].AnyValues(), got[i].AnyValues()
					require.Equal(t, len(ov), len(gv), q)
					for j := range ov {
						for k := range ov[j] {
							a, b := ov[j][k], gv[j][k]
							if fa, ok := a.(float64); ok {
								require.InDelta(t, fa, b, 1e-9*math.Max(1, math.Abs(fa)), "%s: %d shards", q, n)
							} else {
								require.Equal(t, a, b, "%s: %d shards", q, n)
							}
						}
					}
				}
			}
		}
	}
}

// TestMergeBoundsResult: many groups times many buckets is refused, not
// laid out.
func TestMergeBoundsResult(t *testing.T) {
	var src fakeSource
	for h := range 300 {
		src = append(src, engine.Series{Metric: "m", Tags: map[string]string{"host": fmt.Sprint(h), engine.FieldTag: "v"},
			Points: []engine.SeriesPoint{{TS: 5e9, Value: 1}}})
	}
	p, err := plan(t, "SELECT mean(v) FROM m WHERE time >= 0 AND time < 99999s GROUP BY time(1s), host", time.Unix(0, 0))
	require.NoError(t, err)
	r, err := Evaluate(src, &p.Req)
	require.NoError(t, err)
	_, err = p.Merge([]*ShardResult{r})
	require.ErrorIs(t, err, ErrTooLarge)
	p, err = plan(t, "SELECT mean(v) FROM m WHERE time >= 0 AND time < 999s GROUP BY time(1s), host", time.Unix(0, 0))
	require.NoError(t, err)
	r, err = Evaluate(src, &p.Req)
	require.NoError(t, err)
	rows, err := p.Merge([]*ShardResult{r})
	require.NoError(t, err)
	require.Len(t, rows, 300)
	require.Equal(t, 999, rows[0].Len())
}

// TestBucketRowsOffGrid: buckets partly or wholly outside the statement's
// rows, or on another grid (a corrupt or foreign answer), lay out without
// a panic, keeping only what falls on the rows.
func TestBucketRowsOffGrid(t *testing.T) {
	p, err := plan(t, "SELECT sum(v) FROM m WHERE time >= 100s AND time < 160s GROUP BY time(10s)", time.Unix(0, 0))
	require.NoError(t, err)
	mk := func(first, step int64, n int) FieldBuckets {
		f := FieldBuckets{Field: "v", First: first, Step: step}
		for i := range n {
			f.Parts = append(f.Parts, Partial{Count: 1, Sum: float64(i + 1)})
		}
		return f
	}
	for _, c := range []struct {
		f    FieldBuckets
		want []any
	}{
		{mk(80e9, 10e9, 4), []any{3.0, 4.0, nil, nil, nil, nil}},
		{mk(150e9, 10e9, 5), []any{nil, nil, nil, nil, nil, 1.0}},
		{mk(0, 10e9, 3), []any{nil, nil, nil, nil, nil, nil}},
		{mk(300e9, 10e9, 3), []any{nil, nil, nil, nil, nil, nil}},
		{mk(110e9, 5e9, 4), []any{nil, 1.0, 3.0, nil, nil, nil}},
	} {
		times, cols := p.bucketRows(&mergedGroup{fields: map[string]FieldBuckets{"v": c.f}})
		require.Len(t, times, 6)
		var got []any
		for _, cell := range cols[0] {
			got = append(got, cell.Any())
		}
		require.Equal(t, c.want, got, "%+v", c.f)
	}
}

// TestEvaluateBoundsCells: a shard refuses to accumulate more (group,
// bucket) cells than its memory bound, fewer when each cell keeps more than
// a count and a sum.
func TestEvaluateBoundsCells(t *testing.T) {
	require.Greater(t, maxCells(StatSum), 4*maxCells(StatMinMax))
	defer func(v int64) { maxShardBytes = v }(maxShardBytes)
	maxShardBytes = 24 * 1000 // 1,000 count-and-sum cells, 200 min/max ones
	var src fakeSource
	for h := range 5 {
		src = append(src, engine.Series{Metric: "m", Tags: map[string]string{"host": fmt.Sprint(h), engine.FieldTag: "v"},
			Points: []engine.SeriesPoint{{TS: 0, Value: 1}, {TS: 99e9, Value: 2}}})
	}
	// 5 hosts x 100 one-second buckets: 500 cells.
	for fn, over := range map[string]bool{"min": true, "sum": false, "count": false, "percentile": true} {
		call := fn + "(v)"
		if fn == "percentile" {
			call = "percentile(v, 50)"
		}
		p, err := plan(t, "SELECT "+call+" FROM m WHERE time >= 0 AND time <= 99s GROUP BY time(1s), host", time.Unix(0, 0))
		require.NoError(t, err)
		_, err = Evaluate(src, &p.Req)
		if over {
			require.ErrorIs(t, err, ErrTooLarge, fn)
		} else {
			require.NoError(t, err, fn)
		}
	}
}
