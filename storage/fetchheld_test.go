package storage

import (
	"testing"

	"github.com/cairn-db/cairn/storage/client"
	"github.com/stretchr/testify/require"
)

// A fetch holding a shard whose leadership this node has not taken up is
// woken by that replica's changes (its role change signals it as an append
// does) or, while the node has no replica of it, by a replica being opened:
// not by every role change of every replica here, which in a lease storm
// (thousands of role changes a second) re-ran every held fetch each time.
func TestHeldFetchWakesOnItsOwnReplicaOnly(t *testing.T) {
	h := &Host{replicas: map[string]*replica{}, waiters: map[*replica]map[chan struct{}]int{}, created: make(chan struct{})}
	held, other := &replica{id: "d/0"}, &replica{id: "d/1"}
	h.replicas["d/1"] = other
	req := client.FetchRequest{Node: "F", Shards: []client.FetchShard{{DB: "d", Shard: 0, Term: 2}}}
	woken := make(chan struct{}, 1)
	heldOn := make([]*replica, 1)

	created := h.replicaCreated()
	watched, absent := h.watchHeld(req, []bool{true}, heldOn, woken)
	require.False(t, watched)
	require.True(t, absent, "no replica of d/0 yet: the fetch waits for one to be opened")
	h.replicas["d/0"] = held
	h.signalCreated()
	select {
	case <-created:
	default:
		t.Fatal("opening a replica did not wake the holder")
	}

	watched, absent = h.watchHeld(req, []bool{true}, heldOn, woken)
	require.True(t, watched)
	require.False(t, absent)
	watched, _ = h.watchHeld(req, []bool{true}, heldOn, woken)
	require.False(t, watched, "a replica is watched once")
	h.signalAppend(other) // another replica's role change
	require.Empty(t, woken)
	h.signalAppend(held) // its own
	require.Len(t, woken, 1)
	h.unwatch(held, woken)
	require.Empty(t, h.waiters)
}
