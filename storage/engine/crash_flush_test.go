package engine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pauseMidFlush, in the writer child of TestKill9MidBackgroundFlush, stops
// the shard's second background flush for good, before its blocks' commit
// or after it (CAIRN_ENGINE_CRASH_PAUSE), and prints "paused UPTO", UPTO
// being the last txn of the frozen memtable; commits go on into the active
// memtable until one needs to freeze it, which waits.
func pauseMidFlush(s Shard, out *sync.Mutex) {
	at := os.Getenv("CAIRN_ENGINE_CRASH_PAUSE")
	if at == "" {
		return
	}
	bs := s.(*boltShard)
	flushes := 0
	bs.flushHook = func(committed bool) error {
		if committed != (at == "after") {
			return nil
		}
		if flushes++; flushes < 2 {
			return nil
		}
		f := bs.mems.Load().frozen
		out.Lock()
		fmt.Println("paused", f.entries[len(f.entries)-1].txn)
		out.Unlock()
		select {} // until the kill
	}
}

// TestKill9MidBackgroundFlush kills the writer while a background flush is
// stopped before its commit (the frozen memtable exists only in memory and
// the log) or after it (its blocks and flushed_txn are durable, the frozen
// memtable not dropped yet), with acknowledged entries in the active
// memtable on top: every acknowledged entry comes back once, from the
// blocks or the log.
func TestKill9MidBackgroundFlush(t *testing.T) {
	for _, at := range []string{"before", "after"} {
		t.Run(at, func(t *testing.T) {
			const flushPoints = 3*crashPointsPerEntry + 7 // a memtable of 4 entries
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "CAIRN_ENGINE_CRASH_DIR="+dir, "CAIRN_ENGINE_CRASH_FLUSH="+strconv.Itoa(flushPoints),
				"CAIRN_ENGINE_CRASH_PAUSE="+at)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			// Bounded: a child that never gets there is killed, and the
			// checks below say what it did not do.
			stuck := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
			defer stuck.Stop()
			sc := bufio.NewScanner(out)
			var acked, upto uint64
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(sc.Text(), "paused "); ok {
					upto, err = strconv.ParseUint(rest, 10, 64)
					require.NoError(t, err)
				} else {
					txn, err := strconv.ParseUint(sc.Text(), 10, 64)
					require.NoError(t, err)
					acked = max(acked, txn)
				}
				// Three entries past the frozen ones are in the active memtable
				// (a fourth fits too; the fifth waits for the stopped flush).
				// The flusher may print its pause after they were acknowledged.
				if upto > 0 && acked >= upto+3 {
					require.NoError(t, cmd.Process.Kill())
					break
				}
			}
			for sc.Scan() {
				if txn, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
					acked = max(acked, txn)
				}
			}
			_ = cmd.Wait()
			require.EqualValues(t, 8, upto, "the second flush holds txns 5-8")
			require.GreaterOrEqual(t, acked, upto+3)

			s, err := newEngine(t, dir, WithFlushPoints(flushPoints)).Open("crash", 0)
			require.NoError(t, err)
			want := map[string]uint64{"before": 4, "after": 8}[at]
			require.Equal(t, want, flushedTxn(s), "flushed_txn moves with the flush's commit only")
			last := s.LastTxnID()
			require.GreaterOrEqual(t, last, acked, "every acknowledged entry survives kill -9")
			require.LessOrEqual(t, last, upto+4, "the entry waiting for the flush was never acknowledged")
			requireRecovered(t, s, last)
		})
	}
}
