package engine

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// crashShardsWriter runs in a child process: one writer per shard, all
// committing at once through the shared log (small segments, so segments
// are started and removed during the run, and small memtables, so shards
// flush). It prints "shard txn" once each Apply has returned.
func crashShardsWriter(dir string, shards int) {
	e, err := NewBoltEngine(dir, WithFlushPoints(3*crashPointsPerEntry+7), withSegmentBytes(16<<10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for i := range shards {
		s, err := e.Open("crash", i)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s.SetTrimFloor(math.MaxUint64) // no follower: flushed entries may go
		wg.Go(func() {
			for range 20000 { // bounded if the parent dies without killing us
				txn := s.NextTxnID()
				points := make([]lineproto.Point, crashPointsPerEntry, crashPointsPerEntry+1)
				for j := range points {
					points[j] = lineproto.Point{Metric: "m", Field: "value", TS: int64(txn)*crashPointsPerEntry + int64(j), Value: float64(txn)}
				}
				points = append(points, lineproto.Point{Metric: "o", Field: "value", TS: 0, Value: float64(txn)})
				if err := s.Apply(Entry{TxnID: txn, Term: 1, Points: points}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				out.Lock()
				fmt.Println(i, txn)
				out.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestKill9DurabilityAcrossShards kills a process whose 4 shards commit
// concurrently through the shared log while segments come and go: every
// shard keeps every acknowledged entry, each entry whole, nothing of
// another shard's.
func TestKill9DurabilityAcrossShards(t *testing.T) {
	const shards, killAt = 4, 600
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_ENGINE_CRASH_DIR="+dir, "CAIRN_ENGINE_CRASH_SHARDS="+strconv.Itoa(shards))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	acked := make([]uint64, shards)
	total := 0
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 2)
		i, err := strconv.Atoi(f[0])
		require.NoError(t, err)
		txn, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(t, err)
		acked[i] = max(acked[i], txn)
		if total++; total >= killAt && !killed {
			require.NoError(t, cmd.Process.Kill())
			killed = true
		}
	}
	_ = cmd.Wait()
	require.True(t, killed)

	segs := segments(t, dir)
	require.NotEmpty(t, segs)
	require.NotEqual(t, segName(1), filepath.Base(segs[0]), "flushed segments were removed during the run")
	e := newEngine(t, dir, WithFlushPoints(3*crashPointsPerEntry+7), withSegmentBytes(16<<10))
	for i := range shards {
		s, err := e.Open("crash", i)
		require.NoError(t, err)
		last := s.LastTxnID()
		require.GreaterOrEqual(t, last, acked[i], "shard %d: every acknowledged entry survives kill -9", i)
		require.LessOrEqual(t, last, acked[i]+1, "shard %d: at most the entry in flight", i)
		got, err := s.Query("m", nil, 0, 1<<62)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Points, int(last)*crashPointsPerEntry, "shard %d: each entry is all or nothing", i)
		for j, p := range got[0].Points {
			require.EqualValues(t, j/crashPointsPerEntry+1, p.Value)
		}
		got, err = s.Query("o", nil, 0, 0)
		require.NoError(t, err)
		require.Equal(t, []SeriesPoint{{TS: 0, Value: float64(last)}}, got[0].Points, "shard %d: the newest overwrite wins", i)
		require.NoError(t, s.Apply(Entry{TxnID: last + 1, Term: 1}))
	}
}
