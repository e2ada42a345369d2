package lineproto

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

const now = int64(1_700_000_000_000_000_000)

func TestParseGood(t *testing.T) {
	hostA := []Tag{{Key: "host", Value: "a"}}
	tests := []struct {
		name      string
		body      string
		precision string
		want      []Point
	}{
		{
			name: "float with tags and ts",
			body: "cpu,host=a usage=0.5 123",
			want: []Point{{Metric: "cpu", Tags: hostA, Field: "usage", Value: 0.5, TS: 123}},
		},
		{
			name: "tags sorted, all numeric kinds, bools",
			body: "m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true,F=F 5",
			want: []Point{
				{Metric: "m", Tags: []Tag{{"a", "2"}, {"z", "1"}}, Field: "i", Value: -3, Int: -3, Type: models.FieldInteger, TS: 5},
				{Metric: "m", Tags: []Tag{{"a", "2"}, {"z", "1"}}, Field: "u", Value: 4, Int: 4, Type: models.FieldUnsigned, TS: 5},
				{Metric: "m", Tags: []Tag{{"a", "2"}, {"z", "1"}}, Field: "f", Value: 1000, TS: 5},
				{Metric: "m", Tags: []Tag{{"a", "2"}, {"z", "1"}}, Field: "t", Value: 1, Int: 1, Type: models.FieldBoolean, TS: 5},
				{Metric: "m", Tags: []Tag{{"a", "2"}, {"z", "1"}}, Field: "F", Value: 0, Type: models.FieldBoolean, TS: 5},
			},
		},
		{
			name: "integers and unsigned past 2^53 stay exact",
			body: "m big=9007199254740993i,neg=-9223372036854775808i,u=18446744073709551615u 1",
			want: []Point{
				{Metric: "m", Field: "big", Value: 9007199254740992, Int: 9007199254740993, Type: models.FieldInteger, TS: 1},
				{Metric: "m", Field: "neg", Value: -9223372036854775808, Int: math.MinInt64, Type: models.FieldInteger, TS: 1},
				{Metric: "m", Field: "u", Value: 18446744073709551615, Int: -1, Type: models.FieldUnsigned, TS: 1},
			},
		},
		{
			name: "strings with escapes, spaces, commas and a newline",
			body: "system,host=a uptime_format=\"1 day,  2:33\",load1=0.5,q=\"say \\\"hi\\\" \\\\ x=1\" 1\nm s=\"a\nb\" 2\nm e=\"\" 3",
			want: []Point{
				{Metric: "system", Tags: hostA, Field: "uptime_format", Str: "1 day,  2:33", Type: models.FieldString, TS: 1},
				{Metric: "system", Tags: hostA, Field: "load1", Value: 0.5, TS: 1},
				{Metric: "system", Tags: hostA, Field: "q", Str: `say "hi" \ x=1`, Type: models.FieldString, TS: 1},
				{Metric: "m", Field: "s", Str: "a\nb", Type: models.FieldString, TS: 2},
				{Metric: "m", Field: "e", Type: models.FieldString, TS: 3},
			},
		},
		{
			name: "missing timestamp gets now",
			body: "cpu value=1",
			want: []Point{{Metric: "cpu", Field: "value", Value: 1, TS: now}},
		},
		{
			name:      "seconds precision",
			body:      "cpu value=1 2",
			precision: "s",
			want:      []Point{{Metric: "cpu", Field: "value", Value: 1, TS: 2_000_000_000}},
		},
		{
			name:      "ms and negative ts",
			body:      "cpu value=1 -2",
			precision: "ms",
			want:      []Point{{Metric: "cpu", Field: "value", Value: 1, TS: -2_000_000}},
		},
		{
			name:      "us precision",
			body:      "cpu value=1 7",
			precision: "us",
			want:      []Point{{Metric: "cpu", Field: "value", Value: 1, TS: 7000}},
		},
		{
			name: "blank lines, comments, CRLF",
			body: "\n# a comment\r\ncpu,host=a v=1 1\r\n\n  \ncpu,host=a v=2 2\n",
			want: []Point{
				{Metric: "cpu", Tags: hostA, Field: "v", Value: 1, TS: 1},
				{Metric: "cpu", Tags: hostA, Field: "v", Value: 2, TS: 2},
			},
		},
		{
			name: "escapes",
			body: `c\ p\,u,ho\ st=a\=b v\ x=1 1`,
			want: []Point{{Metric: "c p,u", Tags: []Tag{{"ho st", "a=b"}}, Field: "v x", Value: 1, TS: 1}},
		},
		{name: "empty body", body: "", want: []Point{}},
		{name: "only comments", body: "# x\n\n", want: []Point{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.body), tc.precision, now)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseBad(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		line    int
		msgPart string
	}{
		{"missing field", "cpu,host=a", 1, ""},
		{"missing field value", "cpu v=", 1, ""},
		{"no fields after space", "cpu 123", 1, ""},
		{"bad number", "ok v=1\ncpu v=1.2.3 1", 2, "cannot parse"},
		{"bad int", "cpu v=12xi", 1, ""},
		{"unterminated string", "cpu v=1\n\n# c\ncpu v=\"hi", 4, ""},
		{"bad line after a multi-line string", "cpu v=1\ncpu s=\"a\nb\" 1\ncpu v=x", 4, ""},
		{"bad timestamp", "cpu v=1 12a", 1, "timestamp"},
		{"timestamp overflow", "cpu v=1 99999999999999999999", 1, "timestamp"},
		{"timestamp overflow at precision", "cpu v=1 9999999999999999", 1, "precision"},
		{"lone minus timestamp", "cpu v=1 -", 1, "timestamp"},
		{"trailing garbage", "cpu v=1 1 x", 1, ""},
		{"duplicate tag", "cpu,a=1,a=2 v=1", 1, "duplicate"},
		{"no measurement", ",a=1 v=1", 1, ""},
		{"third line bad", "a v=1\nb v=2\nc", 3, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prec := "ns"
			if strings.Contains(tc.name, "at precision") {
				prec = "s"
			}
			got, err := Parse([]byte(tc.body), prec, now)
			require.Nil(t, got, "all-or-nothing: no points on error")
			var le *LineError
			require.True(t, errors.As(err, &le), "want *LineError, got %v", err)
			require.Equal(t, tc.line, le.Line, le.Error())
			require.Contains(t, le.Msg, tc.msgPart)
			require.Contains(t, err.Error(), fmt.Sprintf("line %d", tc.line))
		})
	}
}

func TestParseBadPrecision(t *testing.T) {
	for _, p := range []string{"n", "u", "NS", "H", "min"} {
		_, err := Parse([]byte("cpu v=1 1"), p, now)
		require.ErrorIs(t, err, ErrBadPrecision, p)
	}
}

// TestParseMinutesHours: InfluxDB 1.x's m and h precisions, with the
// overflow check applied after scaling.
func TestParseMinutesHours(t *testing.T) {
	pts, err := Parse([]byte("cpu v=1 2"), "m", now)
	require.NoError(t, err)
	require.Equal(t, int64(120e9), pts[0].TS)
	pts, err = Parse([]byte("cpu v=1 -3"), "h", now)
	require.NoError(t, err)
	require.Equal(t, int64(-3*3600e9), pts[0].TS)
	_, err = Parse([]byte("cpu v=1 9000000000"), "h", now)
	require.ErrorContains(t, err, "out of range")
}

func TestSeriesKeyRoundTrip(t *testing.T) {
	tests := []struct {
		p    Point
		want string
	}{
		{Point{Metric: "cpu", Field: "value"}, "cpu#value"},
		{Point{Metric: "cpu", Tags: []Tag{{"a", "1"}, {"b", "2"}}, Field: "f"}, "cpu,a=1,b=2#f"},
		{Point{Metric: "c,p#u", Tags: []Tag{{"k=", `v\`}}, Field: "f#"}, `c\,p\#u,k\==v\\#f\#`},
		{Point{Metric: ",,a", Tags: []Tag{{"#k", "=="}}, Field: `x\,y`}, `\,\,a,\#k=\=\=#x\\\,y`},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.p.SeriesKey())
		m, tags, f, err := ParseSeriesKey(tc.want)
		require.NoError(t, err)
		require.Equal(t, tc.p.Metric, m)
		require.Equal(t, tc.p.Tags, tags)
		require.Equal(t, tc.p.Field, f)
	}
	for _, bad := range []string{"cpu", "cpu,a#f", `cpu\x#f`, "cpu#f#g", "cpu#f=g", `cpu#f\`} {
		_, _, _, err := ParseSeriesKey(bad)
		require.Error(t, err, bad)
	}
}

func TestShardOf(t *testing.T) {
	// Pinned values: the mapping must never change, data lives where it points.
	require.Equal(t, 0, ShardOf("cpu,host=a#value", 1))
	require.Equal(t, 0, ShardOf("cpu,host=a#value", 0))
	require.Equal(t, int(fnvRef("cpu,host=a#value")%7), ShardOf("cpu,host=a#value", 7))
	require.Equal(t, 5, ShardOf("", 16)) // FNV-1a 64 offset basis 0xcbf29ce484222325 % 16
	require.Equal(t, ShardOf("cpu,host=a#value", 7), ShardOfKey([]byte("cpu,host=a#value"), 7))
	counts := make([]int, 8)
	for i := range 8000 {
		s := ShardOf(fmt.Sprintf("cpu,host=h%d#value", i), 8)
		require.True(t, s >= 0 && s < 8)
		counts[s]++
	}
	for _, c := range counts {
		require.InDelta(t, 1000, c, 200, "shards should be roughly balanced: %v", counts)
	}
}

// TestShardOfSeries: hashing a series without its key lands where its
// key's hash does (the standard library's FNV over the escaped key), for
// names that need escapes too.
func TestShardOfSeries(t *testing.T) {
	names := []string{"", "cpu", "h1", "a,b", "x=y", "#", "\\", "a\\,b#c=d", "é"}
	for _, metric := range names {
		for _, field := range names {
			for _, tags := range [][]Tag{nil, {{"host", "h1"}}, {{"a", "x=y"}, {"k,#", "v\\"}, {"region", "r0"}}} {
				key := AppendSeriesKey(nil, metric, tags, field)
				for _, n := range []int{0, 1, 2, 7, 8, 1024} {
					want := 0
					if n > 1 {
						want = int(fnvRef(string(key)) % uint64(n))
					}
					require.Equal(t, want, ShardOfSeries(metric, tags, field, n), "%q over %d", key, n)
					require.Equal(t, ShardOfKey(key, n), ShardOfSeries(metric, tags, field, n))
				}
			}
		}
	}
}

// TestAppendEscaped: the run-at-a-time escaping writes what escaping one
// byte at a time does.
func TestAppendEscaped(t *testing.T) {
	byByte := func(s string) string {
		var b []byte
		for i := 0; i < len(s); i++ {
			if strings.IndexByte("\\,=#", s[i]) >= 0 {
				b = append(b, '\\')
			}
			b = append(b, s[i])
		}
		return string(b)
	}
	for _, s := range []string{"", "cpu", ",", "\\\\", "a,b=c#d\\e", ",,x==", "x#", "#x", "é,é", "no escapes at all"} {
		require.Equal(t, "pre"+byByte(s), string(appendEscaped([]byte("pre"), s)), "%q", s)
	}
}

// fnvRef is the standard library's FNV-1a 64, an independent reference.
func fnvRef(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a usage=0.5 123",
		"m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true 5\n# c\n\nx v=1",
		`c\ p\,u,ho\ st=a\=b v\ x=1 1`,
		"cpu v=\"s\"",
		"cpu v=1 99999999999999999999",
		"\r\n",
	} {
		f.Add([]byte(s), "ns")
	}
	f.Add([]byte("a b=1 1"), "s")
	f.Fuzz(func(t *testing.T, body []byte, prec string) {
		pts, err := Parse(body, prec, now)
		if err != nil {
			require.Nil(t, pts)
			return
		}
		for _, p := range pts {
			require.NotEmpty(t, p.Metric)
			require.NotEmpty(t, p.Field)
			require.False(t, math.IsNaN(p.Value))
			m, tags, fld, err := ParseSeriesKey(p.SeriesKey())
			require.NoError(t, err)
			require.Equal(t, p.Metric, m)
			require.Equal(t, p.Field, fld)
			require.Equal(t, len(p.Tags), len(tags))
		}
	})
}

func benchBody(lines int) []byte {
	var b strings.Builder
	for i := range lines {
		fmt.Fprintf(&b, "cpu,host=server%03d,region=us-west,dc=dc%d usage_user=%d.25 %d\n",
			i%200, i%3, i%100, 1_700_000_000_000_000_000+int64(i)*1_000_000_000)
	}
	return []byte(b.String())
}

func BenchmarkParse5000(b *testing.B) {
	body := benchBody(5000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		pts, err := Parse(body, "ns", now)
		if err != nil {
			b.Fatal(err)
		}
		n += len(pts)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "points/s")
}

// TestParseLimited: a body over the points limit fails with ErrTooManyPoints
// (counting fields, not lines); at the limit it parses in full.
func TestParseLimited(t *testing.T) {
	body := []byte("cpu,host=a value=1 1\ncpu,host=b value=2,idle=3 2\n\nmem free=4 3\n")
	b, err := ParseBatch(body, Options{MaxPoints: 4})
	require.NoError(t, err)
	require.Len(t, b.Points, 4)
	_, err = ParseBatch(body, Options{MaxPoints: 3})
	require.ErrorIs(t, err, ErrTooManyPoints)
	require.Contains(t, err.Error(), "more than 3 points")
	b, err = ParseBatch(body, Options{})
	require.NoError(t, err)
	require.Len(t, b.Points, 4)
}

// parseByLine is ParseBatch with one decoder per line only: the reference
// the whole-body decoder must agree with.
func parseByLine(body []byte, maxPoints int) (Batch, error) {
	p := parser{mult: 1, now: now, max: maxPoints, strs: map[string]string{}}
	if err := p.parseLines(body); err != nil {
		return Batch{}, err
	}
	return Batch{Points: p.points, Dropped: p.dropped, First: p.first}, nil
}

// FuzzParseWholeBody: one decoder over the whole body reads exactly what one
// decoder per line reads, and fails exactly where it fails.
func FuzzParseWholeBody(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a usage=0.5 123\ncpu,host=b usage=1 124\n",
		"m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true,F=F 5\r\n\n# comment\nm v=1\n",
		"cpu,host=a\\ b v=1 1\ncpu,host=a\\\nb v=1 2\n",
		"cpu v=1 1\rcpu v=2 2\n cpu v=3\n\tcpu v=4 4",
		"cpu s=\"x\ny\" 1\ncpu v=1 1\n",
		"cpu,a=1,a=2 v=1\ncpu v=1 99999999999999999999\n",
		"cpu v=1 1\ncpu v=1,w=2 2\n",
	} {
		f.Add([]byte(s), 0)
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, maxPoints int) {
		maxPoints = max(maxPoints%8, 0)
		got, err := ParseBatch(body, Options{Precision: "ns", Now: now, MaxPoints: maxPoints})
		want, wantErr := parseByLine(body, maxPoints)
		if wantErr != nil {
			require.Error(t, err)
			require.Equal(t, wantErr.Error(), err.Error())
			return
		}
		require.NoError(t, err)
		require.Equal(t, want.Dropped, got.Dropped)
		require.Equal(t, want.First, got.First)
		require.Equal(t, len(want.Points), len(got.Points))
		for i := range want.Points {
			require.Equal(t, want.Points[i], got.Points[i])
		}
	})
}

// TestPointsOutliveTheBody: the points' strings do not alias the body, so a
// caller may reuse its buffer.
func TestPointsOutliveTheBody(t *testing.T) {
	body := []byte("cpu,host=a\\ b,region=eu usage=1 1\nmem,host=c free=2 2\n")
	pts, err := Parse(body, "ns", 0)
	require.NoError(t, err)
	for i := range body {
		body[i] = 'x'
	}
	require.Equal(t, []Point{
		{Metric: "cpu", Tags: []Tag{{"host", "a b"}, {"region", "eu"}}, Field: "usage", Value: 1, TS: 1},
		{Metric: "mem", Tags: []Tag{{"host", "c"}}, Field: "free", Value: 2, TS: 2},
	}, pts)
}

// TestGivenBodyIsNotCopied: with Options.Given the points' strings point
// into the body itself (no copy of it), except those whose escapes were
// undone; the values are those of a parse that copies.
func TestGivenBodyIsNotCopied(t *testing.T) {
	body := []byte("cpu,host=a\\ b,region=eu usage=1,name=\"x\" 1\nmem,host=c free=2 2\n")
	copied, err := ParseBatch(body, Options{})
	require.NoError(t, err)
	given, err := ParseBatch(body, Options{Given: true})
	require.NoError(t, err)
	require.Equal(t, copied, given)
	inBody := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		start := uintptr(unsafe.Pointer(&body[0]))
		return p >= start && p+uintptr(len(s)) <= start+uintptr(len(body))
	}
	for _, pts := range []Point{given.Points[0], given.Points[1], given.Points[2]} {
		require.True(t, inBody(pts.Metric), pts.Metric)
		require.True(t, inBody(pts.Field), pts.Field)
		require.True(t, inBody(pts.Tags[len(pts.Tags)-1].Value), "region=eu, host=c")
	}
	require.False(t, inBody(given.Points[0].Tags[0].Value), "a\\ b unescaped")
	require.True(t, inBody(given.Points[1].Str))
	for _, p := range copied.Points {
		require.False(t, inBody(p.Metric), "without Given: a copy")
	}
}
