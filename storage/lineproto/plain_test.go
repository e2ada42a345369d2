package lineproto

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// decoderParse is ParseBatch without the plain parser: the decoder's
// reading of body, the reference the plain parser must agree with.
func decoderParse(body []byte, o Options) (Batch, error) {
	mult, err := precisionMultiplier(o.Precision)
	if err != nil {
		return Batch{}, err
	}
	p := parser{mult: mult, now: o.Now, max: o.MaxPoints, lim: o.Limits, check: o.Check, strs: map[string]string{}, body: body}
	if wholeBodySafe(body) {
		err := p.parseBody(body)
		if err == nil {
			return Batch{Points: p.points}, nil
		}
		p.points, p.last = p.points[:0], nil
	}
	if err := p.parseLines(body); err != nil {
		return Batch{}, err
	}
	return Batch{Points: p.points, Dropped: p.dropped, First: p.first}, nil
}

// plainAgrees fails t unless the plain parser either declines body or
// reads the very points the decoder reads, and ParseBatch answers as the
// decoder does either way. It returns whether the plain parser took body.
func plainAgrees(t *testing.T, body []byte, o Options) bool {
	t.Helper()
	mult, err := precisionMultiplier(o.Precision)
	require.NoError(t, err)
	p := parser{mult: mult, now: o.Now, max: o.MaxPoints, lim: o.Limits, check: o.Check, strs: map[string]string{}, body: body}
	plain := p.parsePlain(body)
	want, wantErr := decoderParse(body, o)
	if plain {
		require.NoError(t, wantErr, "%q", body)
		require.Nil(t, want.First, "the plain parser took %q, which the decoder drops a line of", body)
		require.Equal(t, len(want.Points), len(p.points), "%q", body)
		for i := range want.Points {
			require.Equal(t, want.Points[i], p.points[i], "%q", body)
		}
	}
	got, err := ParseBatch(body, o)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error(), "%q", body)
		return plain
	}
	require.NoError(t, err)
	require.Equal(t, want.Dropped, got.Dropped, "%q", body)
	require.Equal(t, want.First, got.First, "%q", body)
	require.Equal(t, len(want.Points), len(got.Points), "%q", body)
	for i := range want.Points {
		require.Equal(t, want.Points[i], got.Points[i], "%q", body)
	}
	return plain
}

func TestPlainLines(t *testing.T) {
	o := Options{Precision: "ns", Now: now}
	for _, line := range []string{
		"cpu,host=a usage=0.5 123",
		"cpu,host=h12,region=r0 f0=12.25 1700000000000000000",
		"m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true,F=F,s=\"a b, c=d\" -5",
		"m   v=1   7",
		"m v=1",
		"a=b,\"k=v\" \"f=.5",
		"m v=1 1\n\nm v=2 2\n",
		"m,a=1,a=2 v=1",              // duplicate tag: plain, refused by the common code
		"m v=1 99999999999999999999", // out of range
		"m v=1 1-2",
		"m v=-1e400",
		"m v=9223372036854775808i",
		"m v=-1u",
	} {
		plainAgrees(t, []byte(line), o)
	}
	for _, line := range []string{
		"cpu,host=a usage=0.5 123",
		"m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true,F=F,s=\"a b, c=d\" -5",
		"m   v=1   7",
		"m v=1\nm v=2 2\n",
	} {
		require.True(t, plainAgrees(t, []byte(line), o), "%q is plain", line)
	}
	for _, line := range []string{
		"c\\ pu v=1 1",        // an escape
		"m s=\"a\\\"b\" 1",    // an escape in a string
		"m s=\"a\nb\" 1",      // a string over two lines
		"# comment\nm v=1 1",  // a comment
		"m v=1 1\r\n",         // CRLF
		" m v=1 1",            // leading space
		"m,h=\xc3\xa9 v=1 1",  // UTF-8
		"m v=1 ",              // trailing space
		"m v=1,w=NaN 1",       // bad value
		"m,h=a",               // no fields
		"m v=1 1\nm,=a v=1 2", // a bad line after a good one
		"m v=1 1\nm v=1 1 x",  // text after the timestamp
	} {
		require.False(t, plainAgrees(t, []byte(line), o), "%q is not plain", line)
	}
}

// TestPlainAgreesWithLimits: over a limit, a points bound or the check,
// the plain parser declines and the decoder's answer stands.
func TestPlainAgreesWithLimits(t *testing.T) {
	body := []byte("cpu,host=a,region=eu usage=1,idle=2 1\ncpu,host=bbbbbbbb v=2 2\nmem free=3 3\n")
	for _, o := range []Options{
		{MaxPoints: 2},
		{MaxPoints: 4},
		{Limits: Limits{TagValueBytes: 4}},
		{Limits: Limits{Tags: 1}},
		{Limits: Limits{NameBytes: 4}},
		{Limits: Limits{SeriesKeyBytes: 24}},
		{Check: func(p *Point) error {
			if p.TS == 2 {
				return ErrLimit
			}
			return nil
		}},
	} {
		plainAgrees(t, body, o)
	}
}

// TestPlainRandomLines: lines put together at random from the bytes that
// matter to the grammar, one at a time and as bodies.
func TestPlainRandomLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 160))
	pieces := []string{"m", "cpu", "h", "x1", ",", "=", " ", "  ", "\"", "\\", "\n", "\r", "\t", "#", "-", ".", "0", "1",
		"9", "e", "i", "u", "t", "f", "T", "F", "true", "NaN", "Inf", "1.5", "-2i", "3u", "\xff", "é", "12345678901234567890"}
	skeletons := []string{"m,a=b v=1 1", "cpu,host=h1,r=r0 f0=0.25 17", "m v=\"s\" -1", "m b=t,i=2i,u=3u"}
	plain := 0
	for range 50_000 {
		var b []byte
		if rng.IntN(2) == 0 { // a good line, mutated
			b = []byte(skeletons[rng.IntN(len(skeletons))])
			for range 1 + rng.IntN(3) {
				at := rng.IntN(len(b) + 1)
				piece := pieces[rng.IntN(len(pieces))]
				b = append(b[:at:at], append([]byte(piece), b[at:]...)...)
				if rng.IntN(2) == 0 && at < len(b)-len(piece) {
					b = append(b[:at+len(piece)], b[at+len(piece)+1:]...)
				}
			}
		} else {
			for range 1 + rng.IntN(12) {
				b = append(b, pieces[rng.IntN(len(pieces))]...)
			}
		}
		if rng.IntN(4) == 0 {
			b = append(b, "\ncpu,host=a v=1 1\n"...)
		}
		if plainAgrees(t, b, Options{Precision: "ns", Now: now, MaxPoints: rng.IntN(3)}) {
			plain++
		}
	}
	t.Logf("plain: %d", plain)
	require.Greater(t, plain, 2_500, "the generator reaches plain lines")
}

// FuzzPlainAgrees: the plain parser reads what the decoder reads.
func FuzzPlainAgrees(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a usage=0.5 123\ncpu,host=b usage=1 124\n",
		"m,z=1,a=2 i=-3i,u=4u,f=1e3,t=true,F=F,s=\"x\" 5\n\nm v=1\n",
		"m v=1 1\r\n# c\n",
		"a=b,\"k=v\" \"f=.5 -0",
	} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, body []byte, maxPoints int) {
		plainAgrees(t, body, Options{Precision: "ns", Now: now, MaxPoints: max(maxPoints%8, 0)})
	})
}

// TestShortDecimalIsParseFloat: what shortDecimal reads it reads bit for
// bit as strconv.ParseFloat does, and what it leaves is every other form.
func TestShortDecimalIsParseFloat(t *testing.T) {
	for _, s := range []string{
		"0", "-0", "1", "12.75", "-12.75", "0.1", "-0.3", "1.", ".5", "-.5", "007.5",
		"999999999999999", "99999999999999.9", ".000000000000001", "123456789012345",
		"0.3000000000000", "900719925474.993",
	} {
		want, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, s)
		got, ok := shortDecimal([]byte(s))
		require.True(t, ok, s)
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), s)
	}
	for _, s := range []string{
		"", "-", ".", "-.", "1.2.3", "1e3", "1E3", "0x10", "1_000", "inf", "NaN", "+1",
		"1234567890123456", "0.0000000000000001", "9007199254740.993", "--1", "1-",
	} {
		if s == "" {
			continue // plainValue never hands it an empty value
		}
		_, ok := shortDecimal([]byte(s))
		require.False(t, ok, s)
	}
}

// FuzzShortDecimal: shortDecimal never reads a value ParseFloat refuses or
// reads differently.
func FuzzShortDecimal(f *testing.F) {
	for _, s := range []string{"12.75", "-0", ".5", "1.", "999999999999999", "0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			return
		}
		got, ok := shortDecimal([]byte(s))
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "%q", s)
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%q", s)
	})
}

func BenchmarkPlainValueFloat(b *testing.B) {
	values := [][]byte{[]byte("12.75"), []byte("998.5"), []byte("0.25"), []byte("431")}
	var pt Point
	for i := 0; b.Loop(); i++ {
		if !plainValue(&pt, values[i%len(values)]) {
			b.Fatal("refused")
		}
	}
}
