package storage

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// The feed closes peersGone when a live node leaves or moves to another
// address, and not when a record is rewritten in place (a report, disk
// use) or a node joins: only the first two can end a fetch session. It
// closes peersCame when a node joins or moves, and not when one leaves or
// is rewritten in place: what a follower of a leader not live waits for.
func TestFeedSignalsPeersGoneOnLeaveOrMoveOnly(t *testing.T) {
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	f := NewFeed(sm.Snapshot, sm.Changed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var version int64
	node := func(typ kv.WatchEventKind, id, addr string) {
		version++
		sm.Push(statemachine.Event{Source: statemachine.ClusterNodesSource("default"), Kind: statemachine.KindStorageNodes,
			Cluster: "default", Type: typ, Name: id, Value: models.StorageNode{NodeID: id, NodeAddress: addr, LastUpdated: version}})
		require.Eventually(t, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.seen == nil {
				return false
			}
			n, ok := f.seen.Nodes.At("default").Get(id)
			return ok == (typ == kv.WatchPut) && (!ok || n.LastUpdated == version)
		}, 5*time.Second, time.Millisecond)
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	node(kv.WatchPut, "a", "127.0.0.1:1")
	node(kv.WatchPut, "b", "127.0.0.1:2")
	gone, came := f.peersGone(), f.peersCame()
	node(kv.WatchPut, "c", "127.0.0.1:3")
	require.True(t, closed(came), "a join")
	came = f.peersCame()
	node(kv.WatchPut, "a", "127.0.0.1:1")
	require.False(t, closed(gone), "a join and a record rewritten at the same address end no session")
	require.False(t, closed(came), "a record rewritten at the same address")

	node(kv.WatchPut, "a", "127.0.0.1:9")
	require.True(t, closed(gone), "a node at another address")
	require.True(t, closed(came), "a node at another address")
	gone, came = f.peersGone(), f.peersCame()
	require.False(t, closed(gone))
	node(kv.WatchDelete, "b", "")
	require.True(t, closed(gone), "a node that left")
	require.False(t, closed(came), "a node that left")
}

// A follower takes peersCame before each look at its leader, and a host
// peersGone before each wait: neither waits for a step in progress. Here
// the step is held inside its signalling of a host (the host's pending
// set is locked) while it publishes a database's new records; the signals
// are read meanwhile, and the step then completes.
func TestFeedPeerSignalsDoNotWaitForAStep(t *testing.T) {
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	f := NewFeed(sm.Snapshot, sm.Changed)
	sub := f.subscribe("n1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()

	sub.mu.Lock()
	held := true
	defer func() {
		if held {
			sub.mu.Unlock()
		}
	}()
	sm.Push(statemachine.Event{Source: statemachine.SourceAssign, Kind: statemachine.KindAssign, Type: kv.WatchPut, Name: "d",
		Value: models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1", "n2"}}}}})
	require.Eventually(t, func() bool {
		if f.mu.TryLock() {
			f.mu.Unlock()
			return false
		}
		return true // the step is signalling n1, under f.mu
	}, 5*time.Second, time.Millisecond)

	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = f.peersCame(), f.peersGone()
	}()
	require.Eventually(t, func() bool {
		select {
		case <-read:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "the signals were not read while a step was in progress")

	held = false
	sub.mu.Unlock()
	require.Eventually(t, func() bool {
		_, names := sub.take()
		return names["d"]
	}, 5*time.Second, time.Millisecond)
}
