package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// BenchmarkExpireHours expires the 4 oldest of 6 hours of points (20
// series, a point a second each: 432,000 points whose values do not
// compress) from one shard, and reports how long the expiry took and how
// many bytes the shard's files (the shard file and its partition files)
// gave back. "layout=file": every point in the shard file, as before
// sealed partitions: the expiry deletes blocks and rewrites the file.
// "layout=sealed": the hours sealed first (not timed): the expiry removes
// 4 partition records and their files.
func BenchmarkExpireHours(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := "layout=file"
		if sealed {
			name = "layout=sealed"
		}
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			var freed, wrote, held int64
			for b.Loop() {
				b.StopTimer()
				_, s := openShard1(b, manual...)
				writeRandomHours(b, s, 6, 20)
				if sealed {
					sealAt(b, s, 6*hourNS)
				}
				before := shardBytes(b, s)
				held += before
				b.StartTimer()
				start, w := time.Now(), writtenBytes(b)
				if _, _, err := s.(Expirer).ExpireBefore(4 * hourNS); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				wrote += writtenBytes(b) - w
				freed += before - shardBytes(b, s)
			}
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/expiry")
			b.ReportMetric(float64(freed)/float64(b.N), "bytes_freed/expiry")
			b.ReportMetric(float64(wrote)/float64(b.N), "bytes_written/expiry")
			b.ReportMetric(float64(held)/float64(b.N), "bytes_before")
		})
	}
}

// writeRandomHours writes series series a point a second over [0, hours h),
// random values, and flushes.
func writeRandomHours(tb testing.TB, s Shard, hours int64, series int) {
	rnd := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, series)
	for i := range keys {
		keys[i] = fmt.Sprintf("s=%d", i)
	}
	for ts := int64(0); ts < hours*hourNS; {
		hour := ts / hourNS
		var batch []lineproto.Point
		for range 500 {
			for _, k := range keys {
				batch = append(batch, pt("m", k, "v", ts, rnd.Float64()))
			}
			ts += 1e9
		}
		apply(tb, s, 1, batch...)
		if ts/hourNS != hour {
			flushNow(tb, s)
		}
	}
	flushNow(tb, s)
}

// shardBytes is the size of s's file and its partition files.
func shardBytes(tb testing.TB, s Shard) int64 {
	total := fileSize(tb, s)
	files, err := partFiles(s.(*boltShard).path)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range files {
		total += sizeOf(tb, p)
	}
	return total
}

// writtenBytes is what this process has caused to be written to storage
// (/proc/self/io write_bytes; 0 where there is none).
func writtenBytes(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	return 0
}
