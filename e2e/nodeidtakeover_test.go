package e2e

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNodeIDTakeoverKeepsAcked (issue 8 #1, the nemesis's second copy
// outcome): a storage node's lease expires while no master can act on it
// (the only master frozen), and a copy of its older data dir registers on the
// free key at another address. The original, resumed, finds its id held by
// the copy and exits non-zero naming it; the copy is stopped and the original
// started again on its own data dir. The copy, leading the original's shards
// at the original's term with an older log, finds its followers ahead of it
// in that term and fences its leadership (storage.ErrFenced) instead of
// truncating them. The master, resumed, sees the id at another address and
// publishes every shard it holds again at a higher term (a leave and a
// join). Every batch acknowledged through all of it (through a
// second broker, which keeps running) is readable afterwards; before the
// fence 13,400 of 33,800 acknowledged points were lost here.
func TestNodeIDTakeoverKeepsAcked(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{separateEtcd: true, storageNodes: 3, shards: 2, rf: 3})
	endpoint := c.etcd.argOf("--etcd-listen-client-url")
	b := startNode(t, "broker", endpoint)
	b.waitStatus("/api/v1/ready", 200, 20*time.Second)
	viaB := *c
	viaB.broker = b
	w := startDataWriter(t, &viaB, dataSeries, dataPerPost, 0, 0)
	w.waitAcked(20, 30*time.Second)

	id, led := c.busiestLeader()
	orig := c.proc(id)
	copyDir := t.TempDir()
	out, err := exec.Command("cp", "-a", orig.dataDirArg()+"/.", copyDir).CombinedOutput()
	require.NoError(t, err, "copy data dir: %s", out)
	acked, _ := w.snapshot()
	w.waitAcked(len(acked)+20, 30*time.Second) // the original's logs now run past the copy's

	before := c.shardsOf()
	require.Len(t, before, c.shards)
	c.broker.stop() // no master can fail the original over
	orig.stop()
	require.Eventually(t, func() bool { return storageAddrOf(b, id) == "" }, 20*time.Second, 50*time.Millisecond,
		"the frozen original's record never expired")
	dup := start(t, "--role", "storage", "--data-dir", copyDir, "--http-addr", freeAddr(t),
		"--etcd-endpoints", endpoint, "--lease-ttl", "2s", "--log-format", "json")
	require.Eventually(t, func() bool { return storageAddrOf(b, id) == dup.addr }, 20*time.Second, 50*time.Millisecond,
		"the copy never registered on the free key")
	acked, _ = w.snapshot()
	t.Logf("the copy at %s holds %s (leader of shards %v); %d batches acknowledged so far", dup.addr, id, led, len(acked))

	// The copy leads the original's shards at the original's term with an
	// older log (no master runs to move the term): the followers, ahead of
	// it in that term, are neither truncated nor acknowledge its writes.
	var dupLog []byte
	require.Eventually(t, func() bool {
		dupLog, err = os.ReadFile(dup.log)
		return err == nil && strings.Contains(string(dupLog), "a follower holds entries of this leadership term")
	}, 20*time.Second, 50*time.Millisecond, "the copy never fenced its leadership")
	require.Contains(t, string(dupLog), `"msg":"leading shard"`, "the copy leads the original's shards")

	orig.cont()
	code := orig.wait(30 * time.Second)
	require.NotEqual(t, 0, code, "the original must stop: its id is held by the copy")
	logText, err := os.ReadFile(orig.log)
	require.NoError(t, err)
	require.Contains(t, string(logText), "in use by another live process")
	require.Contains(t, string(logText), dup.addr, "the original names the live holder")
	require.True(t, dup.running(), "the copy holds the id")
	c.broker.cont()
	// The master, back, finds the id at another address: a leave and a join.
	// Every shard the id holds a replica of (all of them at RF 3 on 3 nodes)
	// is published again above its term, so nothing goes on by the old
	// incarnation's leadership or acknowledgements.
	require.Eventually(t, func() bool {
		now := c.shardsOf()
		if len(now) != len(before) {
			return false
		}
		for i, s := range now {
			if s.Term <= before[i].Term {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the moved id's shards were never published above %+v: %+v", before, c.shardsOf())

	require.NoError(t, dup.trySignal(syscall.SIGTERM))
	require.Equal(t, 0, dup.wait(30*time.Second), "the copy's clean stop")
	orig.restart()
	require.Eventually(t, func() bool { return storageAddrOf(b, id) == orig.addr }, 30*time.Second, 50*time.Millisecond,
		"the original never registered again")
	if eventually(c.healthy, 60*time.Second, 100*time.Millisecond) {
		acked, _ = w.snapshot()
		w.waitAcked(len(acked)+20, 60*time.Second)
	} else {
		// The one way this may not heal (a known limit): a follower that
		// lagged when the copy started took unacknowledged entries of the
		// original's term from the copy, beyond the original's log, so the
		// restarted original fences too until a master moves the term.
		// Nothing acknowledged is lost either way.
		logText, err = os.ReadFile(orig.log)
		require.NoError(t, err)
		require.Contains(t, string(logText), "a follower holds entries of this leadership term",
			"the shards never healed, and not because the original fenced: %+v", c.shardsOf())
		t.Logf("the restarted original fenced its leadership (a lagging follower holds the copy's unacknowledged entries); shards %+v", c.shardsOf())
	}
	w.stop()
	acked, fails := w.snapshot()
	t.Logf("%d batches acknowledged, %d failed: %s", len(acked), len(fails), strings.TrimSpace(describeDataFailures(fails)))
	t.Logf("%d acknowledged points checked", c.verifyAcked(w))
}
