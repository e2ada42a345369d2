package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// TestReusedBodiesStoreEveryPoint: writers that reuse their body buffer
// once a write returned nil (as the HTTP handlers do with pooled bodies,
// influx.ReleaseBody), through the broker's pooled parse buffers, into a
// real storage host: every series comes back with its own tags and
// values. A point, tag or key still pointing into a body or a parse buffer
// after its write returned would show the bytes of a later batch here.
func TestReusedBodiesStoreEveryPoint(t *testing.T) {
	const db, shards, writers, perWriter, passes = "r1", 4, 6, 1500, 4
	d, eng := localHost(t, db, shards)
	metrics := [2]string{"m", "n"}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var body []byte
			for pass := range passes {
				// Two batches a pass, of tag values of many lengths, so a
				// reused buffer's bytes land at other offsets each time.
				for half := range 2 {
					body = body[:0]
					for i := half * perWriter / 2; i < (half+1)*perWriter/2; i++ {
						id := w*perWriter + i
						body = fmt.Appendf(body, "%s,id=s%d,pad=%s v=%di %d\n", metrics[(id+pass)%2], id, strings.Repeat("p", 1+(id+pass)%23), id*10+pass, 1_000+pass)
					}
					if err := d.Write(context.Background(), db, "s", body); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)

	// Each series is one id with one pad per pass: the pad of a pass names
	// its own series (id, pad) and holds exactly that pass's point, under
	// the metric of that pass.
	seen := 0
	for shard := range shards {
		sh, err := eng.Open(db, shard)
		require.NoError(t, err)
		var series []engine.Series
		for _, m := range metrics {
			s, err := sh.Query(m, nil, 0, 1_000_000_000_000_000)
			require.NoError(t, err)
			series = append(series, s...)
		}
		for _, s := range series {
			id, err := strconv.Atoi(strings.TrimPrefix(s.Tags["id"], "s"))
			require.NoError(t, err, "series %v", s.Tags)
			require.Len(t, s.Points, 1, "series %v", s.Tags)
			pass := s.Points[0].TS/1_000_000_000 - 1_000
			require.True(t, pass >= 0 && pass < passes, "series %v: timestamp %d", s.Tags, s.Points[0].TS)
			require.Equal(t, strings.Repeat("p", 1+(id+int(pass))%23), s.Tags["pad"], "series %v", s.Tags)
			require.Equal(t, metrics[(id+int(pass))%2], s.Metric, "series %v", s.Tags)
			require.EqualValues(t, id*10+int(pass), s.Points[0].Int, "series %v", s.Tags)
			seen++
		}
	}
	// Two passes of one id may share a pad only when 23 divides their
	// distance: with 4 passes, never. So every point is its own series.
	require.Equal(t, writers*perWriter*passes, seen)
}
