package query

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
	"github.com/stretchr/testify/require"
)

// typedShards writes Telegraf's system input (a float, integers, a string)
// and a boolean as two real engine shards hold them (host a on one, host
// b on the other): each entry flushes the one before, so the last waits in
// the memtable and the others are blocks.
func typedShards(t *testing.T) []Source {
	var out []Source
	for shard, host := range []string{"a", "b"} {
		eng, err := engine.NewBoltEngine(t.TempDir(), engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
		require.NoError(t, err)
		t.Cleanup(func() { _ = eng.Close() })
		sh, err := eng.Open("db", shard)
		require.NoError(t, err)
		tags := []lineproto.Tag{{Key: "host", Value: host}}
		for i := range int64(4) {
			ts := (i + 1) * 1e9
			pts := []lineproto.Point{{Metric: "system", Tags: tags, Field: "load1", TS: ts, Value: 0.5 * float64(i+1)}}
			add := func(field string, typ models.FieldType, bits uint64, s string) {
				p := lineproto.Point{Metric: "system", Tags: tags, Field: field, TS: ts}
				p.SetBits(typ, bits, s)
				pts = append(pts, p)
			}
			add("uptime", models.FieldInteger, uint64(1000*(shard+1))+uint64(i), "")
			add("n_users", models.FieldInteger, uint64(int64(-i)), "")
			add("uptime_format", models.FieldString, 0, fmt.Sprintf("%s %d:00", host, i))
			add("up", models.FieldBoolean, uint64(i%2), "")
			add("bytes", models.FieldUnsigned, 1<<63+uint64(i)<<11, "") // past int64, exact in a float64
			require.NoError(t, sh.Apply(engine.Entry{TxnID: uint64(i + 1), Term: 1, Points: pts}))
		}
		require.NoError(t, sh.(engine.FlushWaiter).WaitFlush())
		out = append(out, sh.(Source))
	}
	return out
}

// query runs q over the shards through the wire format.
func query(t *testing.T, shards []Source, q string) ([][]any, error) {
	t.Helper()
	p, err := plan(t, q, time.Unix(100, 0))
	require.NoError(t, err, q)
	var results []*ShardResult
	for _, src := range shards {
		r, err := Evaluate(src, &p.Req)
		require.NoError(t, err, q)
		back, err := UnmarshalResult(MarshalResult(r, p.Req.Stats))
		require.NoError(t, err, q)
		results = append(results, back)
	}
	rows, err := p.Merge(results)
	if err != nil {
		return nil, err
	}
	var values [][]any
	for _, r := range rows {
		values = append(values, r.AnyValues()...)
	}
	return values, nil
}

// TestTypedQueries: raw selects answer every field in its type (integers
// and unsigned exact, booleans, strings); count, first and last take
// strings (a tie in time keeps the larger, as InfluxDB does); integer sums, extremes and picks stay integers (exact to
// 2^53: they go through a float64), means are floats; booleans have min and max; what InfluxDB refuses for a type
// (sum of strings, median of booleans, ...) is refused with its message.
func TestTypedQueries(t *testing.T) {
	shards := typedShards(t)
	const span = " WHERE time >= 0 AND time <= 10s"
	got, err := query(t, shards, "SELECT uptime, uptime_format, up, bytes, load1 FROM system"+span+" AND host = 'a'")
	require.NoError(t, err)
	require.Equal(t, []any{int64(2e9), int64(1001), "a 1:00", true, uint64(1<<63 + 1<<11), 1.0}, got[1])
	require.Len(t, got, 4)

	got, err = query(t, shards, "SELECT count(uptime_format), first(uptime_format), last(uptime_format), last(up), min(up), max(up) FROM system"+span)
	require.NoError(t, err)
	require.Equal(t, [][]any{{int64(0), int64(8), "b 0:00", "b 3:00", true, false, true}}, got)

	got, err = query(t, shards, "SELECT sum(uptime), max(uptime), min(n_users), first(uptime), spread(uptime), mean(uptime), last(bytes) FROM system"+span)
	require.NoError(t, err)
	require.Equal(t, [][]any{{int64(0), int64(4006 + 8006), int64(2003), int64(-3), int64(2000), int64(1003), 1501.5, uint64(1<<63 + 3<<11)}}, got)

	got, err = query(t, shards, "SELECT last(uptime_format), count(up) FROM system"+span+" GROUP BY time(2s), host fill(none)")
	require.NoError(t, err)
	require.Contains(t, got, []any{int64(2e9), "a 2:00", int64(2)})

	// mean(*) skips the strings and booleans, count(*) counts them too.
	got, err = query(t, shards, "SELECT mean(*), count(*) FROM system"+span)
	require.NoError(t, err)
	require.Len(t, got[0], 1+4+6)
	require.Equal(t, []any{int64(8), int64(8), int64(8), int64(8), int64(8), int64(8)}, got[0][5:])

	for q, msg := range map[string]string{
		"SELECT sum(uptime_format) FROM system":  "unsupported sum iterator type: *query.stringInterruptIterator",
		"SELECT max(uptime_format) FROM system":  "unsupported max iterator type: *query.stringInterruptIterator",
		"SELECT median(up) FROM system":          "unsupported median iterator type: *query.booleanInterruptIterator",
		"SELECT mean(up), count(up) FROM system": "unsupported mean iterator type: *query.booleanInterruptIterator",
	} {
		_, err := query(t, shards, q+span)
		require.EqualError(t, err, msg, q)
		require.True(t, errors.Is(err, ErrBadQuery), q)
	}
}

// TestWireTypedVersions: an answer of floats only is wire version 2, which
// the release before reads; one holding another type is version 3 and
// round-trips its types, and a bad type byte is refused.
func TestWireTypedVersions(t *testing.T) {
	floats := &ShardResult{Raw: []RawSeries{{Field: "v", TS: []int64{1}, Values: []float64{2}}}}
	require.Equal(t, byte(wireV2), MarshalResult(floats, 0)[0])
	typed := &ShardResult{
		Groups: []Group{{Tags: []Tag{}, Fields: []FieldBuckets{{Field: "s", Type: models.FieldString, Parts: []Partial{{Count: 2, X: &Extra{FirstS: "x", LastS: "y", FirstTS: 1, LastTS: 2}}}}}}},
		Raw: []RawSeries{
			NewRawSeries([]Tag{}, "i", []models.SeriesPoint{models.TypedPoint(1, models.FieldInteger, 1<<60+1, "")}),
			NewRawSeries([]Tag{}, "s", []models.SeriesPoint{models.TypedPoint(1, models.FieldString, 0, "héllo")}),
			NewRawSeries([]Tag{}, "b", []models.SeriesPoint{models.TypedPoint(1, models.FieldBoolean, 1, "")}),
			NewRawSeries([]Tag{}, "u", []models.SeriesPoint{models.TypedPoint(1, models.FieldUnsigned, math.MaxUint64, "")}),
		},
	}
	b := MarshalResult(typed, StatFirst|StatLast)
	require.Equal(t, byte(wireV3), b[0])
	back, err := UnmarshalResult(b)
	require.NoError(t, err)
	require.Equal(t, typed, back)
	for i := range b {
		_, err := UnmarshalResult(b[:i])
		require.ErrorIs(t, err, ErrBadWire, "prefix %d", i)
	}
}

// TestShowFieldKeysTypes: SHOW FIELD KEYS answers each field with the type
// its shards hold (a field no shard typed, from a node of the release
// before, is a float).
func TestShowFieldKeysTypes(t *testing.T) {
	stmt, err := influxql.ParseStatement("SHOW FIELD KEYS")
	require.NoError(t, err)
	p, err := PlanShow(stmt, time.Unix(0, 0))
	require.NoError(t, err)
	series, err := ParseSeries([]string{"system,host=a#uptime", "system,host=a#uptime_format", "system,host=a#load1", "net,host=a#up", "old#v"})
	require.NoError(t, err)
	types := models.FieldTypes{"system": {"uptime": models.FieldInteger, "uptime_format": models.FieldString, "load1": models.FieldFloat},
		"net": {"up": models.FieldBoolean}}
	rows := p.Run(series, types)
	got := map[string][][]any{}
	for _, r := range rows {
		got[r.Name] = r.Values
	}
	require.Equal(t, map[string][][]any{
		"net":    {{"up", "boolean"}},
		"old":    {{"v", "float"}},
		"system": {{"load1", "float"}, {"uptime", "integer"}, {"uptime_format", "string"}},
	}, got)
}
