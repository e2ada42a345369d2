package simcluster

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// An agent leaving or joining the live set after every agent registered
// moves the calm moment to the rebalance delay after it (the master's delay
// starts over then, and its plan must be done before idle is measured); a
// record rewritten in place does not.
func TestMembershipChangeMovesTheCalmMoment(t *testing.T) {
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	var version int64
	push := func(typ kv.WatchEventKind, id string) {
		version++
		sm.Push(statemachine.Event{Source: statemachine.ClusterNodesSource("default"), Kind: statemachine.KindStorageNodes,
			Cluster: "default", Type: typ, Name: id, Value: models.StorageNode{NodeID: id, NodeAddress: id, LastUpdated: version}})
		want := version
		require.Eventually(t, func() bool {
			n, ok := sm.Snapshot().Nodes.At("default").Get(id)
			return ok == (typ == kv.WatchPut) && (!ok || n.LastUpdated == want)
		}, 5*time.Second, time.Millisecond)
	}
	push(kv.WatchPut, "a")
	push(kv.WatchPut, "b")
	const delay = time.Hour
	m := watchMembership(sm, "default", delay)
	defer m.stop()
	registered := time.Now().Add(delay) // the calm moment once every agent registered
	push(kv.WatchPut, "a")              // a report: no change of the live set
	require.Never(t, func() bool { return m.calm(registered).After(registered) }, 100*time.Millisecond, 10*time.Millisecond)

	before := time.Now()
	push(kv.WatchDelete, "b") // its lease ran out
	require.Eventually(t, func() bool { return !m.calm(registered).Before(before.Add(delay)) }, 5*time.Second, time.Millisecond)
	left := m.calm(registered)
	push(kv.WatchPut, "b") // registered again
	require.Eventually(t, func() bool { return m.calm(registered).After(left) }, 5*time.Second, time.Millisecond)
}
