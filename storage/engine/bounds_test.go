package engine

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestBoundsMatchesScan: over flushed blocks written out of order, points
// only in the memtable and tag and field filters, Bounds is the span of the
// points Scan visits, and decodes no block.
func TestBoundsMatchesScan(t *testing.T) {
	_, s := openShard1(t, manual...)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 3 {
		var batch []lineproto.Point
		for range 200 {
			for _, h := range []string{"h0", "h1", "h2"}[:1+round] { // h2 only in the memtable
				ts := int64(rng.IntN(100_000)) - 50_000
				batch = append(batch, pt("cpu", "host="+h, []string{"value", "idle"}[rng.IntN(2)], ts, 1))
			}
		}
		apply(t, s, 1, batch...)
		if round < 2 {
			flushNow(t, s)
		}
	}
	b := s.(Bounder)
	for _, c := range []struct {
		match map[string]string
		keep  func(string) bool
	}{
		{nil, func(string) bool { return true }},
		{map[string]string{"host": "h1"}, func(k string) bool { return strings.Contains(k, "host=h1") }},
		{map[string]string{FieldTag: "idle"}, func(k string) bool { return strings.HasSuffix(k, "#idle") }},
		{nil, func(k string) bool { return strings.Contains(k, "host=h2") }},
		{nil, func(string) bool { return false }},
	} {
		lo, hi, found := int64(math.MaxInt64), int64(math.MinInt64), false
		for _, pts := range scanAll(t, s, "cpu", c.match, math.MinInt64, math.MaxInt64, c.keep) {
			lo, hi, found = min(lo, pts[0].TS), max(hi, pts[len(pts)-1].TS), true
		}
		reads := BlockReads()
		gotLo, gotHi, ok, err := b.Bounds("cpu", c.match, c.keep)
		require.NoError(t, err)
		require.Equal(t, found, ok, c.match)
		if found {
			require.Equal(t, [2]int64{lo, hi}, [2]int64{gotLo, gotHi}, c.match)
		}
		require.Equal(t, reads, BlockReads(), "no block decoded")
	}
	_, _, ok, err := b.Bounds("none", nil, func(string) bool { return true })
	require.NoError(t, err)
	require.False(t, ok)
}
