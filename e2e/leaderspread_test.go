package e2e

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeadersReturnAfterRestart: a storage node killed with -9 loses its
// leaderships to failover; restarted, it gets its share back once membership
// has been stable for --rebalance-delay, by graceful transfers that fail no
// write, and no acknowledged point is lost.
func TestLeadersReturnAfterRestart(t *testing.T) {
	t.Setenv("CAIRN_REBALANCE_DELAY", "2s") // every process started below inherits it
	c := startRF3(t, false)
	w := startDataWriter(t, c, dataSeries, dataPerPost, 0, 120*time.Second)
	w.waitAcked(10, 20*time.Second)

	victim, _ := c.busiestLeader()
	p := c.proc(victim)
	p.kill9()
	c.waitLeft(victim, 15*time.Second)
	require.Zero(t, c.leaderCounts()[victim])
	p.restart()
	restarted := time.Now()

	spreadOK := func() bool {
		if !c.healthy() {
			return false
		}
		counts := c.leaderCounts()
		for _, id := range c.ids {
			if _, ok := counts[id]; !ok {
				counts[id] = 0
			}
		}
		vals := slices.Collect(maps.Values(counts))
		return slices.Max(vals)-slices.Min(vals) <= 1
	}
	require.Eventually(t, spreadOK, 60*time.Second, 50*time.Millisecond, "leaders never spread again: %v", c.leaderCounts())
	require.Positive(t, c.leaderCounts()[victim], "the restarted node leads again")
	t.Logf("restart to leaders spread (rebalance delay 2s): %s; leaders %v", time.Since(restarted).Round(time.Millisecond), c.leaderCounts())
	n, _ := w.snapshot()
	w.waitAcked(len(n)+10, 20*time.Second)
	w.stop()
	_, fails := w.snapshot()
	var after []dataFailure
	for _, f := range fails {
		if f.at.After(restarted) {
			after = append(after, f)
		}
	}
	require.Empty(t, after, "writes failed while leaders moved back: %s", describeDataFailures(after))
	c.verifyAcked(w)
}
