package storage

import (
	"testing"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// A follower's fetch wakes what waits on the replica (broadcast) without
// making a channel for the next change unless something asks for one: every
// fetch of every follower broadcasts, and the channel each made, mostly for
// nobody, was a fifth of what the batched fetches allocated. A waiter still
// gets a channel that the next fetch closes.
func TestFetchMakesNoChannelNobodyWaitsOn(t *testing.T) {
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close() })
	s, err := eng.Open("d", 0)
	require.NoError(t, err)
	r := &replica{h: &Host{}, eng: s, want: desired{role: roleLeader, term: 1}, ls: newLeaderState(0)}
	q := fetchReq{term: 1, node: "F"}
	_, err = r.noteFetch(q, 0) // the follower's first fetch makes its entries in the maps
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() { _, _ = r.noteFetch(q, 0) })
	require.Zero(t, allocs, "allocations per fetch")

	r.mu.Lock()
	ch := r.changedLocked()
	r.mu.Unlock()
	_, err = r.noteFetch(q, 0)
	require.NoError(t, err)
	select {
	case <-ch:
	default:
		t.Fatal("a fetch did not wake the waiter")
	}
}
