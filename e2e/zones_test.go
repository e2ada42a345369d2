package e2e

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestZoneLossKeepsEveryShard is issue 24's must-show: 9 storage nodes in
// zones a, b and c (3 each), a storage cluster with failure_domain zone and
// a database of 16 shards x RF 3. Every shard has one replica per zone (read
// from the nodes' labels in /api/v1/nodes); kill -9 of all three nodes of
// zone a while a writer runs leaves every shard online, led outside zone a
// and writable. The three nodes return: once membership has been stable
// for the rebalance delay, every zone leads again (each node's share of the
// leaders within 1 of every other's), and no acknowledged point is lost
// through both moves.
func TestZoneLossKeepsEveryShard(t *testing.T) {
	t.Setenv("CAIRN_REBALANCE_DELAY", "2s") // every process started below inherits it
	zones := []string{"a", "b", "c"}
	c := startDataCluster(t, dataClusterOpts{storageNodes: 9, shards: 16, rf: 3, failureDomain: "zone",
		nodeArgs: func(i int) []string {
			return []string{"--node-labels", fmt.Sprintf("zone=%s,rack=r%d", zones[i%3], i)}
		}})
	var nodes struct {
		Storage map[string][]struct {
			NodeID string            `json:"node_id"`
			Labels map[string]string `json:"labels"`
		} `json:"storage"`
	}
	require.Equal(t, 200, getDataJSON(c.broker, "/api/v1/nodes", &nodes))
	zoneOf := map[string]string{}
	for _, n := range nodes.Storage["default"] {
		zoneOf[n.NodeID] = n.Labels["zone"]
	}
	for i, id := range c.ids {
		require.Equal(t, zones[i%3], zoneOf[id], "labels of %s in /api/v1/nodes", id)
	}
	for _, s := range c.shardsOf() {
		var in []string
		for _, r := range s.Replicas {
			in = append(in, zoneOf[r])
		}
		slices.Sort(in)
		require.Equal(t, zones, in, "shard %d replicas %v", s.ID, s.Replicas)
	}

	w := startDataWriter(t, c, 64, 64, 0, 0)
	w.waitAcked(20, 20*time.Second)
	var zoneA []string
	for i, id := range c.ids {
		if zones[i%3] == "a" {
			zoneA = append(zoneA, id)
			c.storage[i].kill9()
		}
	}
	killed := time.Now()
	require.Eventually(t, func() bool {
		shards := c.shardsOf()
		if len(shards) != c.shards {
			return false
		}
		for _, s := range shards {
			if s.Status != "online" || slices.Contains(zoneA, s.Leader) {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "shards not all online outside zone a: %+v", c.shardsOf())
	t.Logf("every shard online and led outside zone a %s after the kill (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
	acked, _ := w.snapshot()
	w.waitAcked(len(acked)+20, 20*time.Second)

	for i := range c.ids {
		if zones[i%3] == "a" {
			c.storage[i].restart()
		}
	}
	back := time.Now()
	byZone := func() (map[string]int, map[string]int) {
		zl, nl := map[string]int{}, map[string]int{}
		for _, id := range c.ids {
			nl[id] = 0
		}
		for _, s := range c.shardsOf() {
			zl[zoneOf[s.Leader]]++
			nl[s.Leader]++
		}
		return zl, nl
	}
	require.Eventually(t, func() bool {
		if !c.healthy() {
			return false
		}
		zl, nl := byZone()
		vals := slices.Collect(maps.Values(nl))
		return len(zl) == 3 && zl[""] == 0 && slices.Max(vals)-slices.Min(vals) <= 1
	}, 60*time.Second, 50*time.Millisecond, "leaders never spread again over the zones and nodes")
	zl, nl := byZone()
	for _, z := range zones {
		require.GreaterOrEqual(t, zl[z], 3, "zone %s leads %d of 16 shards: %v", z, zl[z], zl)
	}
	t.Logf("zone a back: leaders spread over the zones %v and nodes %v %s after the restart (rebalance delay 2s)",
		zl, nl, time.Since(back).Round(time.Millisecond))
	acked, _ = w.snapshot()
	w.waitAcked(len(acked)+20, 20*time.Second)
	w.stop()
	_, fails := w.snapshot()
	var afterBack []dataFailure
	for _, f := range fails {
		if f.at.After(back) {
			afterBack = append(afterBack, f)
		}
	}
	require.Empty(t, afterBack, "writes failed while leaders moved back to zone a: %s", describeDataFailures(afterBack))
	t.Logf("checked %d acknowledged points; %d batches refused while zone a was lost, none after it returned", c.verifyAcked(w), len(fails))
}
