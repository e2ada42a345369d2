package engine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

const crashPointsPerEntry = 50

// crashWriter runs in a child process: it applies entries and prints each txn
// id once Apply has returned, i.e. once the write is acknowledged. Every entry
// also overwrites the one point of series "o", so recovery must replay the
// unflushed tail in order on top of the flushed data. With writers > 1, that
// many goroutines append concurrently (numbering their entries under a lock,
// waiting outside it, as leaders do), so acknowledgements come from group
// commits.
func crashWriter(dir string, flushPoints, writers int) {
	e, err := NewBoltEngine(dir, WithFlushPoints(flushPoints))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := e.Open("crash", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var numbering, out sync.Mutex
	pauseMidFlush(s, &out)
	var wg sync.WaitGroup
	for range max(writers, 1) {
		wg.Go(func() {
			// Bounded so a parent that dies without killing us does not leave us running.
			for range 100000 / max(writers, 1) {
				numbering.Lock()
				txn := s.NextTxnID()
				points := make([]lineproto.Point, crashPointsPerEntry, crashPointsPerEntry+1)
				for j := range points {
					points[j] = lineproto.Point{Metric: "m", Field: "value", TS: int64(txn)*crashPointsPerEntry + int64(j), Value: float64(txn)}
				}
				points = append(points, lineproto.Point{Metric: "o", Field: "value", TS: 0, Value: float64(txn)})
				wait, err := s.Append(Entry{TxnID: txn, Term: 1, Points: points})
				numbering.Unlock()
				if err == nil {
					err = wait()
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				out.Lock()
				fmt.Println(txn)
				out.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestKill9Durability kills the writer before any flush: recovery is a
// replay of the log.
func TestKill9Durability(t *testing.T) {
	kill9(t, DefaultFlushPoints, 30, 1)
}

// TestKill9DurabilityGroupCommit kills a writer of 6 concurrent appenders,
// whose acknowledgements come from shared commits, across flushes: every
// acknowledged entry survives, and the log has no hole.
func TestKill9DurabilityGroupCommit(t *testing.T) {
	kill9(t, 3*crashPointsPerEntry+7, 180, 6)
}

// TestKill9DurabilityAcrossFlushes kills the writer after many entries with a
// flush every few of them, so the kill lands anywhere: between flushes, or in
// the middle of one (its commit is all or nothing, and the log replays it).
func TestKill9DurabilityAcrossFlushes(t *testing.T) {
	for _, killAt := range []uint64{97, 251} {
		t.Run(strconv.FormatUint(killAt, 10), func(t *testing.T) {
			kill9(t, 3*crashPointsPerEntry+7, killAt, 1)
		})
	}
}

func kill9(t *testing.T, flushPoints int, killAt uint64, writers int) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_ENGINE_CRASH_DIR="+dir, "CAIRN_ENGINE_CRASH_FLUSH="+strconv.Itoa(flushPoints),
		"CAIRN_ENGINE_CRASH_WRITERS="+strconv.Itoa(writers))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	// With several writers acknowledgements come out of order: acked is the
	// highest, and every entry below it was committed before it.
	sc := bufio.NewScanner(out)
	var acked uint64
	for sc.Scan() {
		txn, err := strconv.ParseUint(sc.Text(), 10, 64)
		require.NoError(t, err)
		acked = max(acked, txn)
		if acked >= killAt {
			require.NoError(t, cmd.Process.Kill()) // SIGKILL: no deferred cleanup runs
			break
		}
	}
	// Acks already in the pipe were also acknowledged before the kill.
	for sc.Scan() {
		txn, err := strconv.ParseUint(sc.Text(), 10, 64)
		require.NoError(t, err)
		acked = max(acked, txn)
	}
	_ = cmd.Wait()
	require.GreaterOrEqual(t, acked, killAt)

	s, err := newEngine(t, dir, WithFlushPoints(flushPoints)).Open("crash", 0)
	require.NoError(t, err)
	last := s.LastTxnID()
	require.GreaterOrEqual(t, last, acked, "every acknowledged entry survives kill -9")
	require.LessOrEqual(t, last, acked+uint64(writers), "at most the entries in flight at the kill")
	if flushPoints < int(killAt)*crashPointsPerEntry {
		require.Positive(t, flushedTxn(s), "some entries were flushed before the kill")
	}
	requireRecovered(t, s, last)
}

// requireRecovered checks a shard recovered after kill -9 with last as its
// last entry: every entry's points of series m once, all or nothing, the
// newest overwrite of series o, and the shard keeps working, flushes
// included.
func requireRecovered(t *testing.T, s Shard, last uint64) {
	t.Helper()
	got, err := s.Query("m", nil, 0, 1<<62)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0].Points, int(last)*crashPointsPerEntry, "each entry once, all or nothing")
	for i, p := range got[0].Points {
		require.EqualValues(t, i/crashPointsPerEntry+1, p.Value)
	}
	got, err = s.Query("o", nil, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []SeriesPoint{{TS: 0, Value: float64(last)}}, got[0].Points, "the newest overwrite wins")
	require.NoError(t, s.Apply(Entry{TxnID: last + 1, Term: 1}))
	flushNow(t, s)
	require.EqualValues(t, last+1, flushedTxn(s))
}
