package engine

import (
	"github.com/cairn-db/cairn/models"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// scanAll collects a Scan's answer as Query would return it, by key.
func scanAll(t *testing.T, s Shard, metric string, match map[string]string, start, end int64, keep func(string) bool) map[string][]SeriesPoint {
	t.Helper()
	out := map[string][]SeriesPoint{}
	var order []string
	require.NoError(t, s.(Scanner).Scan(metric, match, start, end, keep, func(key string, pts []SeriesPoint) error {
		require.NotContains(t, out, key, "a series is visited once")
		out[key] = slices.Clone(pts)
		order = append(order, key)
		return nil
	}))
	require.True(t, slices.IsSorted(order), "series come in key order")
	return out
}

// TestScanMatchesQuery: over flushed blocks, memtable points that overwrite
// flushed ones, series only in the memtable and several tag filters, Scan
// visits exactly the series and points Query returns.
func TestScanMatchesQuery(t *testing.T) {
	_, s := openShard1(t, manual...)
	rng := rand.New(rand.NewPCG(1, 2))
	hosts := []string{"h0", "h1", "h2", "h3"}
	for round := range 3 {
		for i := range 20 {
			var batch []lineproto.Point
			for range 30 {
				for _, h := range hosts[:2+round] { // h3 first appears in the last round, unflushed
					for _, f := range []string{"value", "idle"} {
						ts := int64(rng.IntN(2000)) * 10
						batch = append(batch, pt("cpu", "host="+h+",region=eu", f, ts, float64(i)))
					}
				}
			}
			apply(t, s, 1, batch...)
		}
		if round < 2 {
			flushNow(t, s)
		}
	}
	apply(t, s, 1, pt("mem", "host=h0", "value", 5, 1))
	all := func(string) bool { return true }
	for _, c := range []struct {
		match      map[string]string
		start, end int64
	}{
		{nil, 0, 20000},
		{map[string]string{"host": "h1"}, 500, 9000},
		{map[string]string{FieldTag: "idle"}, 0, 20000},
		{map[string]string{FieldTag: "value", "host": "h3"}, 100, 15000},
		{map[string]string{"host": "nope"}, 0, 20000},
		{nil, 30000, 40000},
	} {
		series, err := s.Query("cpu", c.match, c.start, c.end)
		require.NoError(t, err)
		want := map[string][]SeriesPoint{}
		for _, sr := range series {
			want[seriesKeyOf(sr)] = sr.Points
		}
		got := scanAll(t, s, "cpu", c.match, c.start, c.end, func(key string) bool {
			_, ok, err := matchSeries(key, c.match)
			require.NoError(t, err)
			return ok
		})
		require.Equal(t, want, got, "match %v [%d, %d]", c.match, c.start, c.end)
	}
	// keep is asked before any point is read, and what it drops is not visited.
	got := scanAll(t, s, "cpu", nil, 0, 20000, func(key string) bool { return strings.Contains(key, "host=h2") })
	require.Len(t, got, 2)
	require.Len(t, scanAll(t, s, "cpu", nil, 20, 10, all), 0, "an empty range")
}

func seriesKeyOf(sr Series) string {
	var b strings.Builder
	b.WriteString(sr.Metric)
	var keys []string
	for k := range sr.Tags {
		if k != FieldTag {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("," + k + "=" + sr.Tags[k])
	}
	f := sr.Tags[FieldTag]
	if f == "" {
		f = DefaultField
	}
	b.WriteString("#" + f)
	return b.String()
}

// TestScanReadsOnlyOverlappingBlocks counts block decodes (issue 14): an
// aggregation scan of a narrow time range over 5 series of 5 blocks each
// decodes one block per series (two where the range straddles a block
// boundary), and a range past the data decodes none.
func TestScanReadsOnlyOverlappingBlocks(t *testing.T) {
	_, s := openShard1(t, manual...)
	for b := range 5 {
		var pts []lineproto.Point
		for i := range maxBlockPoints {
			ts := int64(b*maxBlockPoints+i) * 10
			for h := range 5 {
				pts = append(pts, pt("m", "h="+string(rune('a'+h)), "value", ts, float64(i)))
			}
		}
		apply(t, s, 1, pts...)
		flushNow(t, s)
	}
	require.Equal(t, 25, countBlocks(t, s))
	all := func(string) bool { return true }
	count := func(start, end int64) (uint64, int) {
		before := BlockReads()
		got := scanAll(t, s, "m", nil, start, end, all)
		n := 0
		for _, pts := range got {
			n += len(pts)
		}
		return BlockReads() - before, n
	}
	reads, n := count(int64(2*maxBlockPoints+5)*10, int64(2*maxBlockPoints+9)*10)
	require.EqualValues(t, 5, reads)
	require.Equal(t, 25, n)
	reads, n = count(int64(3*maxBlockPoints-2)*10, int64(3*maxBlockPoints+1)*10)
	require.EqualValues(t, 10, reads)
	require.Equal(t, 20, n)
	reads, n = count(int64(5*maxBlockPoints)*10, int64(6*maxBlockPoints)*10)
	require.EqualValues(t, 0, reads)
	require.Zero(t, n)
	reads, _ = count(0, int64(5*maxBlockPoints)*10)
	require.EqualValues(t, 25, reads)
}

// BenchmarkDecodeBlock: full blocks of regular 1-minute points, with
// integer values (the decimal mode) and with arbitrary floats (XOR).
func BenchmarkDecodeBlock(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kind := range []string{"decimal", "xor"} {
		pts := make([]memPoint, maxBlockPoints)
		for i := range pts {
			v := float64(rng.IntN(1000))
			if kind == "xor" {
				v = rng.Float64() * 100
			}
			pts[i] = memPoint{int64(i) * 60e9, math.Float64bits(v)}
		}
		block := encodeBlock(nil, pts, models.FieldFloat)
		b.Run(kind, func(b *testing.B) {
			var dst []memPoint
			b.SetBytes(int64(len(block)))
			for range b.N {
				var err error
				if dst, _, err = decodeBlock(dst[:0], block); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*maxBlockPoints), "ns/point")
		})
	}
}

// TestBlockRunsRoundTrip: blocks whose timestamps and values hold runs of
// equal steps of every length (the decoder takes a run of 0 bits at once,
// up to a 57-bit window) around irregular steps, ending mid-run or not,
// decode to exactly what was encoded.
func TestBlockRunsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 400 {
		n := 1 + rng.IntN(maxBlockPoints)
		pts := make([]memPoint, n)
		ts, step := int64(rng.IntN(1000))-500, int64(1+rng.IntN(100))
		v, dv := float64(rng.IntN(100)), float64(rng.IntN(5))
		run := 0
		for i := range pts {
			if run == 0 { // a new run of one step, 1..130 points long
				run = 1 + rng.IntN(130)
				step = max(1, step+int64(rng.IntN(7))-3)
				dv = float64(rng.IntN(5) - 2)
			}
			run--
			ts += step
			v += dv
			bitsV := math.Float64bits(v)
			if trial%3 == 0 { // two decimals
				bitsV = math.Float64bits(v / 100)
			} else if trial%3 == 1 { // XOR mode
				bitsV = math.Float64bits(v + 0.1234567)
			}
			pts[i] = memPoint{ts, bitsV}
		}
		block := encodeBlock(nil, pts, models.FieldFloat)
		got, _, err := decodeBlock([]memPoint{{1, 1}}, block)
		require.NoError(t, err, "trial %d", trial)
		require.Equal(t, pts, got[1:], "trial %d", trial)
	}
}

// TestScanWhileWriting: scans running beside writes and the flushes they
// trigger always see whole entries, points sorted and in range, and never
// fewer points than an earlier scan (run it with -race).
func TestScanWhileWriting(t *testing.T) {
	_, s := openShard1(t, WithFlushPoints(300), WithFlushInterval(0), WithCompactRate(0))
	done := make(chan struct{})
	var writeErr error
	go func() {
		defer close(done)
		for i := range int64(40) {
			var pts []lineproto.Point
			for h := range 10 {
				pts = append(pts, pt("m", "h="+string(rune('a'+h)), "value", i*10, float64(i)))
			}
			if writeErr = s.Apply(Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: pts}); writeErr != nil {
				return
			}
		}
	}()
	last := 0
	all := func(string) bool { return true }
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		n := 0
		require.NoError(t, s.(Scanner).Scan("m", nil, 50, 10_000, all, func(_ string, pts []SeriesPoint) error {
			require.True(t, slices.IsSortedFunc(pts, func(a, b SeriesPoint) int { return int(a.TS - b.TS) }))
			require.GreaterOrEqual(t, pts[0].TS, int64(50))
			n += len(pts)
			return nil
		}))
		require.Zero(t, n%10, "whole entries only")
		require.GreaterOrEqual(t, n, last)
		last = n
	}
	require.NoError(t, writeErr)
	require.Equal(t, 35*10, last)
}
