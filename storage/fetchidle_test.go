package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// An idle follower's batched fetch parks longer after each poll that came
// back empty (FetchWait, then twice that, up to idleFetchWait), and a poll
// that brings entries brings it back to FetchWait; the follower stays in
// the in-sync set throughout and a write is acknowledged while it is parked.
func TestIdleFetchParksLonger(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()
	var mu sync.Mutex
	var waits []int64 // the parks F asked L for, in order
	observe := func(c *gin.Context) {
		if c.Request.URL.Path == "/internal/v1/fetch" {
			body, _ := io.ReadAll(c.Request.Body)
			c.Request.Body = io.NopCloser(bytes.NewReader(body))
			var req client.FetchRequest
			if json.Unmarshal(body, &req) == nil && req.Node == "F" {
				mu.Lock()
				waits = append(waits, req.WaitMS)
				mu.Unlock()
			}
		}
		c.Next()
	}
	seen := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	leader, _ := runNode(t, "L", "", sm, store, eng, observe) // lag bound 500ms
	follower := startNode(t, "F", sm, store)                  // FetchWait 2s
	twoReplicas(t, sm, store, leader, follower)
	ctx := context.Background()
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 10*time.Millisecond)
	// The set on record can show before the leader has taken it up (it
	// refuses writes until then: still publishing).
	require.Eventually(t, func() bool { return leader.host.Write(ctx, "d", 0, 1, points(0, 10)) == nil }, 10*time.Second, 10*time.Millisecond)

	// Idle: one empty 2 s poll, then the session parks for 4 s.
	from := len(seen())
	require.Eventually(t, func() bool { return slices.Contains(seen()[from:], 4000) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"L", "F"}, isrOf(t, store, 0), "parked past the lag bound, still in sync")

	// A write while it is parked is acknowledged (F woke, applied it, and
	// acknowledged it with its next poll), and that poll parks for 2 s again.
	from = len(seen())
	require.NoError(t, leader.host.Write(ctx, "d", 0, 1, points(10, 10)))
	require.Eventually(t, func() bool { return len(seen()) > from }, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 2000, seen()[from], "an answer with entries brings the park back to FetchWait")
	require.Equal(t, []string{"L", "F"}, isrOf(t, store, 0))
}
