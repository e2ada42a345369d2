package e2e

import (
	"testing"
	"time"
)

// TestDeadFollowerLeavesISRWithoutWrites (issue 8 #5): after kill -9 of a
// follower, with no write arriving, its replicas leave every in-sync set
// within the catch-up window (the leader sees its lease gone and its fetches
// stop); the shards stay online under their leaders.
func TestDeadFollowerLeavesISRWithoutWrites(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 4, rf: 3})
	victim := c.ids[2]
	c.moveLeadersOff(victim)
	c.proc(victim).kill9()
	c.waitLeft(victim, 20*time.Second)
}
