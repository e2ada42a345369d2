package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrainUnderLoad: draining a storage node under a steady write load moves
// every replica and leadership off it (new replicas catch up from the leader
// first), no shard ever has fewer replicas than its replica factor, no write
// fails and every acknowledged point stays readable.
func TestDrainUnderLoad(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 4, shards: 8, rf: 2})
	w := startDataWriter(t, c, dataSeries, dataPerPost, 0, 120*time.Second)
	w.waitAcked(10, 20*time.Second)

	victim := c.ids[0]
	code, body := c.broker.post("/api/v1/nodes/"+victim+"/drain", nil)
	require.Equal(t, 202, code, "%v", body)
	require.Eventually(t, func() bool {
		shards := c.shardsOf()
		if len(shards) != c.shards {
			return false
		}
		done := true
		for _, s := range shards {
			require.GreaterOrEqual(t, len(s.Replicas), c.rf, "shard %d fell below its replica factor: %v", s.ID, s.Replicas)
			if slices.Contains(s.Replicas, victim) || s.Leader == victim || len(s.ISR) != c.rf || s.Status != "online" {
				done = false
			}
		}
		return done
	}, 60*time.Second, 50*time.Millisecond, "the drained node kept replicas")
	w.waitAcked(len(mustAcked(w))+5, 20*time.Second)
	w.stop()
	acked, fails := w.snapshot()
	t.Logf("drain: %d batches acknowledged, longest stall %s", len(acked), dataLongestStall(acked).Round(time.Millisecond))
	require.Empty(t, fails, "failed writes during a drain: %s", describeDataFailures(fails))
	t.Logf("%d acknowledged points verified", c.verifyAcked(w))
}

func mustAcked(w *dataWriter) []dataBatch {
	acked, _ := w.snapshot()
	return acked
}
