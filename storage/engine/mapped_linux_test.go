package engine

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// mappedKiB is the resident size of this process's mappings of path, from
// /proc/self/smaps.
func mappedKiB(t *testing.T, path string) int {
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[len(fields)-1] == path
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			require.NoError(t, err)
			total += n
		}
	}
	require.NoError(t, sc.Err())
	return total
}

// TestFlushAndCompactionReleaseMappedPages: the pages of the shard file that
// a full read maps stay resident until a flush or a compaction step
// releases them, and reads after that still see every point.
func TestFlushAndCompactionReleaseMappedPages(t *testing.T) {
	_, s := openShard1(t, WithFlushInterval(0), WithCompactRate(0))
	path := s.(*boltShard).path
	for batch := range 8 {
		points := make([]lineproto.Point, 0, 2000)
		for i := range 2000 {
			points = append(points, pt("m", fmt.Sprintf("h=%d", i), "value", int64(batch), float64(i)))
		}
		apply(t, s, 1, points...)
		flushNow(t, s)
	}
	read := func() {
		got, err := s.Query("m", nil, math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		require.Len(t, got, 2000)
		for _, sr := range got {
			require.Len(t, sr.Points, 8)
		}
	}
	read()
	require.Greater(t, mappedKiB(t, path), 256, "a full read maps the file's pages")

	apply(t, s, 1, pt("other", "", "value", 100, 1))
	flushNow(t, s)
	require.Less(t, mappedKiB(t, path), 64, "the flush released them")

	read()
	require.Greater(t, mappedKiB(t, path), 256)
	_, _, err := s.(*boltShard).compactStep(compactBudget, backgroundCompact)
	require.NoError(t, err)
	require.Less(t, mappedKiB(t, path), 64, "so did the compaction step")
	read()
}
