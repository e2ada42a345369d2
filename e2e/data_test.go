package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The data-path tests run one writer of 50-point batches over 50 series, so
// every batch touches every one of the 8 shards: a batch acknowledged after
// an event proves every shard accepts writes again.
const (
	dataSeries  = 50
	dataPerPost = 50
	dataShards  = 8
	// dataLeaseTTL is the --lease-ttl every data-path process runs with.
	dataLeaseTTL = 2 * time.Second
	// dataLagBound is the storage nodes' in-sync lag bound (HostConfig default).
	dataLagBound = 2 * time.Second
)

func startRF3(t *testing.T, separateEtcd bool) *dataCluster {
	return startDataCluster(t, dataClusterOpts{separateEtcd: separateEtcd, storageNodes: 3, shards: dataShards, rf: 3})
}

// TestKillLeaderLosesNothing: kill -9 of a storage node leading shards stalls
// writes for at most lease TTL + 1 s, loses no acknowledged point, and the
// node, restarted with its data dir, rejoins every in-sync set.
func TestKillLeaderLosesNothing(t *testing.T) {
	killLeaderLosesNothing(t, startRF3(t, false))
}

// killLeaderLosesNothing is TestKillLeaderLosesNothing on a running cluster
// (the secured clusters of security_test.go run it too).
func killLeaderLosesNothing(t *testing.T, c *dataCluster) {
	killLeaderDuring(t, c, startDataWriter(t, c, dataSeries, dataPerPost, 0, 90*time.Second))
}

// TestKillLeaderDuringPartialWrites (issue 21): the same with batches
// holding bad lines: each is acknowledged by its 400 partial write, and no
// line it stored is lost to the kill.
func TestKillLeaderDuringPartialWrites(t *testing.T) {
	c := startRF3(t, false)
	// About 3 bad lines in each batch of 50.
	killLeaderDuring(t, c, launchDataWriterOver(t, c, []*Proc{c.broker}, 0, dataSeries, dataPerPost, 0, 90*time.Second, 17))
}

func killLeaderDuring(t *testing.T, c *dataCluster, w *dataWriter) {
	w.waitAcked(20, 20*time.Second)

	victim, led := c.busiestLeader()
	p := c.proc(victim)
	killed := time.Now()
	p.kill9()

	// Every batch touches every shard, so the longest time between two
	// acknowledgements bounds the write outage any shard saw; the first
	// batch sent after the kill adds one batch latency to it.
	resumed := w.firstAckStartedAfter(killed, 15*time.Second)
	acked, fails := w.snapshot()
	stall := dataLongestStall(acked)
	t.Logf("kill -9 of %s (leader of shards %v): longest stall between acknowledgements %s; first batch sent after the kill acknowledged %s after it; failures %s",
		victim, led, stall.Round(time.Millisecond), resumed.end.Sub(killed).Round(time.Millisecond), describeDataFailures(fails))
	require.LessOrEqual(t, stall, dataLeaseTTL+time.Second, "writes must resume within lease TTL + 1 s of the kill")
	c.waitLeft(victim, 10*time.Second)
	// Keep writing a little after the failover so the restarted node has
	// something to catch up on.
	w.waitAcked(len(acked)+10, 20*time.Second)
	w.stop()
	n := c.verifyAcked(w)
	t.Logf("%d acknowledged points verified", n)

	p.restart()
	require.Equal(t, victim, nodeID(t, p), "same data dir must keep the node id")
	c.waitHealthy(30 * time.Second)
	c.verifyAcked(w)
}

// TestRollingRestart: SIGTERM each storage node in turn under a steady write
// load: every node exits 0, no write fails and no acknowledged point is lost.
func TestRollingRestart(t *testing.T) {
	c := startRF3(t, false)
	w := startDataWriter(t, c, dataSeries, dataPerPost, 0, 120*time.Second)
	w.waitAcked(10, 20*time.Second)

	for i, p := range c.storage {
		acked, _ := w.snapshot()
		took := p.term() // asserts exit code 0
		// The handoff moved its leaderships and took it out of every
		// in-sync set before it exited.
		c.waitLeft(c.ids[i], 10*time.Second)
		p.restart()
		require.Equal(t, c.ids[i], nodeID(t, p))
		c.waitHealthy(30 * time.Second)
		// Writes kept flowing through the restart.
		w.waitAcked(len(acked)+5, 20*time.Second)
		t.Logf("%s: SIGTERM exit took %s, back in every in-sync set", c.ids[i], took.Round(time.Millisecond))
	}
	w.stop()
	acked, fails := w.snapshot()
	t.Logf("rolling restart: %d batches acknowledged, longest stall %s", len(acked), dataLongestStall(acked).Round(time.Millisecond))
	require.Empty(t, fails, "failed writes during a rolling restart: %s", describeDataFailures(fails))
	n := c.verifyAcked(w)
	t.Logf("%d acknowledged points verified", n)
}

// TestWritesWithEtcdDown: with the etcd member killed, writes and queries
// through the broker to the existing shards keep succeeding; once etcd is
// back the cluster is healthy and everything acknowledged is readable.
func TestWritesWithEtcdDown(t *testing.T) {
	c := startRF3(t, true)
	before := startDataWriter(t, c, dataSeries, dataPerPost, 5, 0)
	before.waitAcked(5, 20*time.Second)
	before.stop()

	c.etcd.kill9()
	require.Eventually(t, func() bool {
		code, r := c.broker.get("/api/v1/ready")
		return code == 200 && r["etcd"] == "down"
	}, 10*time.Second, 50*time.Millisecond, "broker never noticed etcd down")

	// Each writer gets its own sequence range, so its points are its own.
	during := startDataWriterAt(t, c, 1_000_000, 10)
	during.waitAcked(10, 30*time.Second)
	during.stop()
	_, fails := during.snapshot()
	require.Empty(t, fails, "writes failed with etcd down: %s", describeDataFailures(fails))
	c.verifyAcked(before)
	c.verifyAcked(during)

	c.etcd.restart()
	c.waitHealthy(30 * time.Second)
	after := startDataWriterAt(t, c, 2_000_000, 5)
	after.waitAcked(5, 20*time.Second)
	after.stop()
	for _, w := range []*dataWriter{before, during, after} {
		c.verifyAcked(w)
	}
}

// TestFollowerPartitioned: a frozen (SIGSTOP) storage node that only
// follows is dropped from every in-sync set within the lag bound, writes
// carry on, and once resumed it catches up and is re-added everywhere;
// nothing acknowledged is lost.
func TestFollowerPartitioned(t *testing.T) {
	c := startRF3(t, false)
	victim := c.ids[0]
	c.moveLeadersOff(victim)
	freezeAndResume(t, c, victim)
}

// TestLeaderPartitioned: the same with a frozen node that leads shards: its
// leaderships fail over once its lease expires, and writes carry on.
func TestLeaderPartitioned(t *testing.T) {
	c := startRF3(t, false)
	victim, _ := c.busiestLeader()
	freezeAndResume(t, c, victim)
}

// freezeAndResume runs a writer, SIGSTOPs victim, checks that writes resume
// within the lag bound + lease TTL (+1 s of slack) and that victim leaves
// every in-sync set, then SIGCONTs it and checks that it rejoins them all and
// that every acknowledged point is readable.
func freezeAndResume(t *testing.T, c *dataCluster, victim string) {
	w := startDataWriter(t, c, dataSeries, dataPerPost, 0, 90*time.Second)
	w.waitAcked(10, 20*time.Second)

	led := c.leaderCounts()[victim]
	p := c.proc(victim)
	stopped := time.Now()
	p.stop()
	frozen := true
	t.Cleanup(func() {
		if frozen {
			p.cont()
		}
	})

	resumed := w.firstAckStartedAfter(stopped, 20*time.Second)
	acked, _ := w.snapshot()
	stall := dataLongestStall(acked)
	t.Logf("SIGSTOP of %s (leader of %d shards): longest stall between acknowledgements %s; first batch sent after it acknowledged %s after it",
		victim, led, stall.Round(time.Millisecond), resumed.end.Sub(stopped).Round(time.Millisecond))
	require.LessOrEqual(t, stall, dataLagBound+dataLeaseTTL+time.Second, "writes must resume within the lag bound + lease TTL")
	c.waitLeft(victim, 15*time.Second)
	acked, _ = w.snapshot()
	w.waitAcked(len(acked)+5, 20*time.Second)

	p.cont()
	frozen = false
	c.waitHealthy(30 * time.Second)
	w.stop()
	acked, fails := w.snapshot()
	t.Logf("partition: %d batches acknowledged, longest stall %s, failures %s",
		len(acked), dataLongestStall(acked).Round(time.Millisecond), describeDataFailures(fails))
	require.Empty(t, fails, "failed writes: %s", describeDataFailures(fails))
	n := c.verifyAcked(w)
	t.Logf("%d acknowledged points verified", n)
}
