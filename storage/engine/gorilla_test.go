package engine

import (
	"encoding/binary"
	"github.com/cairn-db/cairn/models"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomSeries makes sorted unique points in one of several shapes that
// exercise every timestamp bucket and value case of the codec.
func randomSeries(rng *rand.Rand, n int) []memPoint {
	ts := rng.Int64N(1<<40) - 1<<39
	step := int64(rng.IntN(4)+1) * 1e9
	shape := rng.IntN(7)
	pts := make([]memPoint, 0, n)
	v := rng.NormFloat64() * 100
	for i := 0; i < n; i++ {
		switch shape {
		case 0: // regular
			ts += step
		case 1: // jitter of every size
			ts += step + rng.Int64N([]int64{3, 200, 4000, 1 << 40}[rng.IntN(4)])
		default:
			ts += 1 + rng.Int64N(1<<uint(rng.IntN(60)))
		}
		switch shape {
		case 0, 1:
			v = math.Round(v) + float64(rng.IntN(3)-1) // integer-valued gauge
		case 2:
			v = rng.Float64()
		case 6: // two decimals, or huge integers
			if i%2 == 0 {
				v = float64(rng.IntN(100000)) / 100
			} else {
				v = float64(rng.Int64N(1<<53) - 1<<52)
			}
		case 3:
			v = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64,
				math.SmallestNonzeroFloat64, v}[rng.IntN(8)]
		default:
			v = math.Float64frombits(rng.Uint64())
		}
		pts = append(pts, memPoint{ts, math.Float64bits(v)})
	}
	return pts
}

func TestBlockRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 3000; i++ {
		pts := randomSeries(rng, rng.IntN(maxBlockPoints)+1)
		enc := encodeBlock(nil, pts, models.FieldFloat)
		got, _, err := decodeBlock(nil, enc)
		require.NoError(t, err, "case %d", i)
		require.Equal(t, pts, got, "case %d", i)
		h, _, err := parseBlock(enc)
		require.NoError(t, err)
		require.Equal(t, blockHeader{len(pts), pts[0].ts, pts[len(pts)-1].ts, models.FieldFloat}, h)
	}
}

func TestBlockExtremeTimestamps(t *testing.T) {
	for _, pts := range [][]memPoint{
		{{math.MinInt64, 1}, {math.MaxInt64, 2}},
		{{math.MinInt64, 1}, {0, 2}, {math.MaxInt64, 3}},
		{{-5, 0}, {-4, 0}, {-3, 0}},
		{{42, math.Float64bits(math.NaN())}},
		{},
	} {
		got, _, err := decodeBlock(nil, encodeBlock(nil, pts, models.FieldFloat))
		require.NoError(t, err)
		require.Equal(t, len(pts), len(got))
		if len(pts) > 0 {
			require.Equal(t, pts, got)
		}
	}
}

// TestBlockCompressesRegularSeries pins the point of the codec: a 10 s series
// of slowly moving integer gauge values costs about a byte and a half a point.
func TestBlockCompressesRegularSeries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	pts := make([]memPoint, maxBlockPoints)
	v := 50.0
	for i := range pts {
		if rng.IntN(4) == 0 {
			v += float64(rng.IntN(5) - 2)
		}
		pts[i] = memPoint{int64(1.7e18) + int64(i)*10e9, math.Float64bits(v)}
	}
	enc := encodeBlock(nil, pts, models.FieldFloat)
	require.Less(t, float64(len(enc))/float64(len(pts)), 1.5, "bytes per point")
}

// TestBlockDetectsEveryTornWrite cuts a block at every byte offset, and also
// flips one bit at every offset: each must fail with ErrBlockCorrupt.
func TestBlockDetectsEveryTornWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	enc := encodeBlock(nil, randomSeries(rng, 300), models.FieldFloat)
	for k := 0; k < len(enc); k++ {
		_, _, err := decodeBlock(nil, enc[:k])
		require.ErrorIs(t, err, ErrBlockCorrupt, "cut at %d", k)
		zeroed := append(slices.Clone(enc[:k]), make([]byte, len(enc)-k)...)
		if !slices.Equal(zeroed, enc) {
			_, _, err = decodeBlock(nil, zeroed)
			require.ErrorIs(t, err, ErrBlockCorrupt, "zeroed from %d", k)
		}
		flipped := slices.Clone(enc)
		flipped[k] ^= 1 << (k % 8)
		_, _, err = decodeBlock(nil, flipped)
		require.ErrorIs(t, err, ErrBlockCorrupt, "bit flip at %d", k)
	}
}

// FuzzBlockDecode: arbitrary bytes (checksum fixed up, so the decoder itself
// is exercised) never panic and never yield more points than the header says.
func FuzzBlockDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	f.Add(encodeBlock(nil, randomSeries(rng, 10), models.FieldFloat)[4:])
	f.Add([]byte{1, 3, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.LittleEndian.AppendUint32(nil, 0)
		b = append(b, body...)
		sealBlock(b, 0)
		pts, _, err := decodeBlock(nil, b)
		if err == nil {
			h, _, _ := parseBlock(b)
			require.Len(t, pts, h.count)
		}
	})
}

// FuzzBlockRoundTrip: any sorted unique series round-trips exactly.
func FuzzBlockRoundTrip(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var pts []memPoint
		for len(raw) >= 16 {
			pts = append(pts, memPoint{int64(binary.LittleEndian.Uint64(raw)), binary.LittleEndian.Uint64(raw[8:])})
			raw = raw[16:]
		}
		slices.SortFunc(pts, func(a, b memPoint) int { return cmpPointTS(a, b.ts) })
		pts = slices.CompactFunc(pts, func(a, b memPoint) bool { return a.ts == b.ts })
		got, _, err := decodeBlock(nil, encodeBlock(nil, pts, models.FieldFloat))
		require.NoError(t, err)
		if len(pts) == 0 {
			require.Empty(t, got)
			return
		}
		require.Equal(t, pts, got)
	})
}
