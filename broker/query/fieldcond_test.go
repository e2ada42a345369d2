package query

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// twoFields: series host=a and host=b of m, fields v and w, at t = 1..6 s;
// w is missing at 3 s on host a.
func twoFields() fakeSource {
	var out fakeSource
	for h, host := range []string{"a", "b"} {
		v := engine.Series{Metric: "m", Tags: map[string]string{"host": host, engine.FieldTag: "v"}}
		w := engine.Series{Metric: "m", Tags: map[string]string{"host": host, engine.FieldTag: "w"}}
		for i := int64(1); i <= 6; i++ {
			ts := i * 1e9
			v.Points = append(v.Points, engine.SeriesPoint{TS: ts, Value: float64(i*10 + int64(h))})
			if host != "a" || i != 3 {
				w.Points = append(w.Points, engine.SeriesPoint{TS: ts, Value: float64(100 - i)})
			}
		}
		out = append(out, v, w)
	}
	return out
}

func runOne(t *testing.T, src fakeSource, q string) []Row {
	t.Helper()
	p, err := plan(t, q, time.Unix(100, 0))
	require.NoError(t, err, q)
	return evalShards(t, p, src)
}

// evalShards runs p over each shard's source, through the wire, and merges.
func evalShards(t *testing.T, p *Plan, shards ...fakeSource) []Row {
	t.Helper()
	var results []*ShardResult
	for _, src := range shards {
		r, err := Evaluate(src, &p.Req)
		require.NoError(t, err)
		back, err := UnmarshalResult(MarshalResult(r, p.Req.Stats))
		require.NoError(t, err)
		results = append(results, back)
	}
	rows, err := p.Merge(results)
	require.NoError(t, err)
	return rows
}

// TestFieldConditions: a WHERE on field values keeps the rows (series, time)
// it holds for, whichever fields the statement selects, mixed with tag
// conditions under AND and OR; a missing field compares false.
func TestFieldConditions(t *testing.T) {
	src := twoFields()
	const span = " AND time >= 0 AND time < 10s"
	for q, want := range map[string][][]any{
		"SELECT w FROM m WHERE v > 40 AND host = 'a'" + span:              {{int64(5e9), 95.0}, {int64(6e9), 94.0}},
		"SELECT v FROM m WHERE w >= 97 AND host = 'a'" + span:             {{int64(1e9), 10.0}, {int64(2e9), 20.0}},
		"SELECT v FROM m WHERE w != 0 AND host = 'a'" + span:              {{int64(1e9), 10.0}, {int64(2e9), 20.0}, {int64(4e9), 40.0}, {int64(5e9), 50.0}, {int64(6e9), 60.0}},
		"SELECT v FROM m WHERE (v = 31 OR v < 15) AND w > 0" + span:       {{int64(1e9), 10.0}, {int64(1e9), 11.0}, {int64(3e9), 31.0}},
		"SELECT v FROM m WHERE (v <= 20 OR host = 'b' AND v > 59)" + span: {{int64(1e9), 10.0}, {int64(1e9), 11.0}, {int64(2e9), 20.0}, {int64(6e9), 61.0}},
		"SELECT v FROM m WHERE v > w" + span:                              nil,
		"SELECT count(v), sum(w) FROM m WHERE v > 30" + span:              {{int64(0), int64(7), 667.0}},
		"SELECT max(v) FROM m WHERE v::field < 40 AND host = 'b'" + span:  {{int64(3e9), 31.0}},
	} {
		rows := runOne(t, src, q)
		var got [][]any
		for _, r := range rows {
			got = append(got, r.AnyValues()...)
		}
		require.Equal(t, want, got, q)
	}
	rows := runOne(t, src, "SELECT mean(w) FROM m WHERE v > 30"+span+" GROUP BY host")
	require.Len(t, rows, 2)
	require.Equal(t, [][]any{{int64(0), 95.0}}, rows[0].AnyValues()) // a: 4..6 s
	require.Equal(t, [][]any{{int64(0), 95.5}}, rows[1].AnyValues()) // b: 3..6 s
}

// TestFieldConditionBounds: the points read to decide a field condition
// count against the request's MaxPoints.
func TestFieldConditionBounds(t *testing.T) {
	p, err := plan(t, "SELECT mean(v) FROM m WHERE w > 0 AND time >= 0 AND time < 10s", time.Unix(100, 0))
	require.NoError(t, err)
	p.Req.MaxPoints = 10
	_, err = Evaluate(twoFields(), &p.Req)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestConditionChecks(t *testing.T) {
	for cond, ok := range map[string]bool{
		"v > 3":               true,
		"v > w":               true,
		"host = 'a' OR v < 1": true,
		"v =~ /x/":            true, // a tag regex
		"v + 1 > 3":           false,
		"host > 'a'":          false,
	} {
		_, err := ParseCond(cond)
		require.Equal(t, ok, err == nil, "%s: %v", cond, err)
	}
	e, err := ParseCond("host = 'a' AND (v > 3 OR w::field < 2)")
	require.NoError(t, err)
	require.Equal(t, []string{"v", "w"}, CondFields(e))
	require.Error(t, CheckTagCond(e), "SHOW takes tag conditions only")
}

// TestFieldConditionAcrossShards: the fields of one tag set on different
// shards are joined on the broker, and the shards get the tag terms only.
func TestFieldConditionAcrossShards(t *testing.T) {
	var vs, ws fakeSource
	for _, s := range twoFields() {
		if s.Tags[engine.FieldTag] == "v" {
			vs = append(vs, s)
		} else {
			ws = append(ws, s)
		}
	}
	q := "SELECT sum(w) FROM m WHERE (v > 30 OR host = 'x') AND host = 'b' AND time >= 0 AND time < 10s"
	p, err := plan(t, q, time.Unix(100, 0))
	require.NoError(t, err)
	require.NotNil(t, p.Local)
	require.True(t, p.Req.Raw)
	require.Equal(t, []string{"v", "w"}, p.Req.Fields)
	require.Equal(t, "host = 'b'", p.Req.Cond)
	rows := evalShards(t, p, vs, ws)
	require.Len(t, rows, 1)
	require.Equal(t, [][]any{{int64(0), 382.0}}, rows[0].AnyValues())

	// One field read: the shards filter, the broker merges as usual.
	p, err = plan(t, "SELECT mean(v) FROM m WHERE v > 30 AND time >= 0 AND time < 10s", time.Unix(100, 0))
	require.NoError(t, err)
	require.Nil(t, p.Local)
	require.Equal(t, "v > 30", p.Req.Cond)
}

func TestTagTerms(t *testing.T) {
	for cond, want := range map[string]string{
		"v > 1":                              "",
		"host = 'a' AND v > 1":               "host = 'a'",
		"host = 'a' OR v > 1":                "",
		"(host = 'a' OR v > 1) AND dc = 'x'": "dc = 'x'",
		"(host = 'a' AND v > 1) OR dc = 'x'": "(host = 'a') OR (dc = 'x')",
	} {
		e, err := ParseCond(cond)
		require.NoError(t, err)
		got := ""
		if tt := tagTerms(e); tt != nil {
			got = tt.String()
		}
		require.Equal(t, want, got, cond)
	}
}
