package engine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

const crashPointsPerEntry = 50

// crashWriter runs in a child process: it applies entries and prints each txn
// id once Apply has returned, i.e. once the write is acknowledged.
func crashWriter(dir string) {
	e, err := NewBoltEngine(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := e.Open("crash", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Bounded so a parent that dies without killing us does not leave us running.
	for i := 0; i < 100000; i++ {
		txn := s.LastTxnID() + 1
		points := make([]lineproto.Point, crashPointsPerEntry)
		for j := range points {
			points[j] = lineproto.Point{Metric: "m", Field: "value", TS: int64(txn)*crashPointsPerEntry + int64(j), Value: float64(txn)}
		}
		if err := s.Apply(Entry{TxnID: txn, Term: 1, Points: points}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(txn)
	}
	os.Exit(0)
}

func TestKill9Durability(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_ENGINE_CRASH_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	sc := bufio.NewScanner(out)
	var acked uint64
	for sc.Scan() {
		acked, err = strconv.ParseUint(sc.Text(), 10, 64)
		require.NoError(t, err)
		if acked == 30 {
			require.NoError(t, cmd.Process.Kill()) // SIGKILL: no deferred cleanup runs
			break
		}
	}
	// Acks already in the pipe were also acknowledged before the kill.
	for sc.Scan() {
		acked, err = strconv.ParseUint(sc.Text(), 10, 64)
		require.NoError(t, err)
	}
	_ = cmd.Wait()
	require.GreaterOrEqual(t, acked, uint64(30))

	s, err := newEngine(t, dir).Open("crash", 0)
	require.NoError(t, err)
	last := s.LastTxnID()
	require.GreaterOrEqual(t, last, acked, "every acknowledged entry survives kill -9")
	require.LessOrEqual(t, last, acked+1, "at most the entry in flight at the kill")
	got, err := s.Query("m", nil, 0, 1<<62)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0].Points, int(last)*crashPointsPerEntry, "each entry is all or nothing")
	// The shard keeps working after recovery.
	require.NoError(t, s.Apply(Entry{TxnID: last + 1, Term: 1}))
}
