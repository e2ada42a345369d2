package query

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// bucketValues is a shard answer's non-empty buckets by group, field and
// start: what a broker merges, whatever span each array covers.
func bucketValues(r *ShardResult) map[string]Partial {
	out := map[string]Partial{}
	for _, g := range r.Groups {
		for _, f := range g.Fields {
			for i, p := range f.Parts {
				if p.Count == 0 {
					continue
				}
				if p.X != nil {
					x := *p.X
					x.M2 = 0 // merges compute it; only stddev asks for it
					p.X = &x
				}
				out[fmt.Sprintf("%s %s %d", GroupKey(g.Tags), f.Field, f.First+int64(i)*f.Step)] = p
			}
		}
	}
	return out
}

// TestEvaluateFromRollup (issue 27): a GROUP BY time(1h) over a range older
// than the raw retention, answered from a 5m rollup after the raw points
// expired, has the buckets the raw points gave before, reading no block;
// a range reaching past the retention reads the raw points only there.
func TestEvaluateFromRollup(t *testing.T) {
	eng, err := engine.NewBoltEngine(t.TempDir(), engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(t, err)
	defer eng.Close()
	sh, err := eng.Open("db", 0)
	require.NoError(t, err)
	levels := []models.Rollup{{Interval: models.Duration(5 * time.Minute), Retention: models.Duration(30 * models.Day)},
		{Interval: models.Duration(time.Hour)}}
	require.NoError(t, sh.(engine.Rollups).SetRollups([]time.Duration{5 * time.Minute, time.Hour}))
	hour, step := int64(time.Hour), int64(10*time.Second)
	// Hours 0-5 of 10 s points for 3 hosts, an entry per hour, then one
	// point at 7h and one of another measurement: each entry flushes the
	// one before.
	for h := range int64(6) {
		var pts []lineproto.Point
		for host := range int64(3) {
			tags := []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("h%d", host)}}
			for ts := h * hour; ts < (h+1)*hour; ts += step {
				pts = append(pts, lineproto.Point{Metric: "cpu", Tags: tags, Field: "v", TS: ts, Value: float64((ts/step*7+host)%101) / 2})
			}
		}
		require.NoError(t, sh.Apply(engine.Entry{TxnID: uint64(h + 1), Term: 1, Points: pts}))
	}
	require.NoError(t, sh.Apply(engine.Entry{TxnID: 7, Term: 1, Points: []lineproto.Point{
		{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "h0"}}, Field: "v", TS: 7 * hour, Value: 3}}}))
	require.NoError(t, sh.Apply(engine.Entry{TxnID: 8, Term: 1, Points: []lineproto.Point{{Metric: "mem", Field: "v", TS: 7 * hour, Value: 1}}}))
	require.NoError(t, sh.(engine.FlushWaiter).WaitFlush())

	now := time.Unix(0, 8*hour)
	rawFrom := now.Add(-2 * time.Hour).UnixNano() // a raw retention of 2h
	q := "SELECT mean(v), max(v), min(v), sum(v), count(v), first(v), last(v), spread(v) FROM cpu WHERE time >= 0 AND time < %d GROUP BY time(1h), host"
	p, err := plan(t, fmt.Sprintf(q, 6*hour), now)
	require.NoError(t, err)
	before, err := Evaluate(sh.(Source), &p.Req)
	require.NoError(t, err)
	want := bucketValues(before)
	require.Len(t, want, 18, "6 hours x 3 hosts")

	_, _, err = sh.(engine.Expirer).ExpireBefore(rawFrom)
	require.NoError(t, err)
	gone, err := Evaluate(sh.(Source), &p.Req)
	require.NoError(t, err)
	require.Empty(t, bucketValues(gone), "the raw points of hours 0-5 are gone")

	req, ok := PlanRollup(&p.Req, levels, rawFrom, now)
	require.True(t, ok)
	require.Equal(t, int64(5*time.Minute), req.Rollup, "the finest level holding the range")
	blocks, cells := engine.BlockReads(), engine.RollupReads()
	after, err := Evaluate(sh.(Source), req)
	require.NoError(t, err)
	require.Equal(t, want, bucketValues(after))
	require.Equal(t, blocks, engine.BlockReads(), "only rollup cells are read")
	require.EqualValues(t, 6*12*3, engine.RollupReads()-cells)

	// A range ending inside an interval leaves that interval's cell out:
	// up to 5h07m, hour 5 holds the cell of 5h00-5h05 only (30 points).
	p, err = plan(t, fmt.Sprintf(q, 5*hour+7*int64(time.Minute)), now)
	require.NoError(t, err)
	req, ok = PlanRollup(&p.Req, levels, rawFrom, now)
	require.True(t, ok)
	after, err = Evaluate(sh.(Source), req)
	require.NoError(t, err)
	require.Equal(t, int64(30), bucketValues(after)[fmt.Sprintf("%s v %d", GroupKey([]Tag{{"host", "h1"}}), 5*hour)].Count)

	// Up to 8h: hours 0-5 from the cells, the raw point at 7h from its block.
	p, err = plan(t, fmt.Sprintf(q, 8*hour), now)
	require.NoError(t, err)
	req, ok = PlanRollup(&p.Req, levels, rawFrom, now)
	require.True(t, ok)
	blocks = engine.BlockReads()
	after, err = Evaluate(sh.(Source), req)
	require.NoError(t, err)
	got := bucketValues(after)
	require.Equal(t, int64(1), got[fmt.Sprintf("%s v %d", GroupKey([]Tag{{"host", "h0"}}), 7*hour)].Count)
	delete(got, fmt.Sprintf("%s v %d", GroupKey([]Tag{{"host", "h0"}}), 7*hour))
	require.Equal(t, want, got)
	require.EqualValues(t, 1, engine.BlockReads()-blocks)
}

// TestPlanRollup: a rollup level answers only what its cells hold, at its
// own interval's multiples, past the raw retention; the finest level that
// still holds the range's start is chosen, and the range is cut to the
// chosen level's retention.
func TestPlanRollup(t *testing.T) {
	now := time.Unix(0, 0).Add(100 * 24 * time.Hour)
	day := int64(24 * time.Hour)
	rawFrom := now.Add(-2 * time.Hour).UnixNano()
	five := models.Rollup{Interval: models.Duration(5 * time.Minute), Retention: models.Duration(30 * models.Day)}
	hourly := models.Rollup{Interval: models.Duration(time.Hour), Retention: models.Duration(90 * models.Day), Functions: []string{"count", "sum"}}
	levels := []models.Rollup{five, hourly}
	at := func(q string) *ShardRequest {
		p, err := plan(t, q, now)
		require.NoError(t, err, q)
		return &p.Req
	}
	for _, q := range []string{
		"SELECT mean(v) FROM m WHERE time > now() - 1h GROUP BY time(1h)",           // the raw points hold it
		"SELECT stddev(v) FROM m WHERE time > now() - 6h GROUP BY time(1h)",         // no M2 in cells
		"SELECT median(v) FROM m WHERE time > now() - 6h GROUP BY time(1h)",         // nor values
		"SELECT mean(v) FROM m WHERE time > now() - 6h GROUP BY time(7m)",           // not a multiple of 5m
		"SELECT mean(v) FROM m WHERE time > now() - 6h GROUP BY time(1h, 2m)",       // not aligned
		"SELECT mean(v) FROM m WHERE time > now() - 6h AND v > 3 GROUP BY time(1h)", // a field condition
		"SELECT v FROM m WHERE time > now() - 6h",                                   // raw
		"SELECT mean(v) FROM m WHERE time > now() - 6h",                             // no GROUP BY time
	} {
		_, ok := PlanRollup(at(q), levels, rawFrom, now)
		require.False(t, ok, q)
	}
	_, ok := PlanRollup(at("SELECT max(v) FROM m WHERE time > now() - 6h GROUP BY time(1h)"), []models.Rollup{hourly}, rawFrom, now)
	require.False(t, ok, "a level that does not list max")
	r, ok := PlanRollup(at("SELECT mean(v), max(v) FROM m WHERE time > now() - 6h AND host = 'a' GROUP BY time(1h, 10m)"), levels, rawFrom, now)
	require.True(t, ok)
	require.Equal(t, int64(5*time.Minute), r.Rollup)
	require.Equal(t, ceilTo(rawFrom, int64(5*time.Minute)), r.RollupUntil)
	r, ok = PlanRollup(at("SELECT mean(v) FROM m WHERE time > now() - 60d GROUP BY time(1d)"), levels, rawFrom, now)
	require.True(t, ok)
	require.Equal(t, int64(time.Hour), r.Rollup, "only the hourly level holds 60 days back")
	r, ok = PlanRollup(at("SELECT count(v) FROM m WHERE time > now() - 200d GROUP BY time(1d)"), levels, rawFrom, now)
	require.True(t, ok)
	require.Equal(t, int64(time.Hour), r.Rollup, "none holds it all: the level kept longest")
	require.Equal(t, now.UnixNano()-90*day, r.Start, "cut to that level's retention")
	for ts, want := range map[int64]int64{0: 0, 1: 300e9, -1: 0, 300e9: 300e9, math.MinInt64: math.MinInt64 + 300e9 - floorMod(math.MinInt64, 300e9),
		math.MaxInt64: math.MaxInt64} {
		require.Equal(t, want, ceilTo(ts, 300e9), "%d", ts)
	}
}
