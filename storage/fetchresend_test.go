package storage_test

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// A shard leaving a session whose main poll is parked at the leader (its
// replica moved off the follower) re-sends that poll at once without it,
// the joined shard's side poll folded in: the poll parked for up to a
// minute is not waited out. (The session cancels its main poll itself; it
// used to take a goroutine per poll waiting for a change of members.)
func TestLeavingShardResendsTheParkedPoll(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(t.Context())
	defer sm.Stop()

	var mu sync.Mutex
	var polls [][]string // the databases of F's batched fetches at L, in order
	observe := func(c *gin.Context) {
		if c.Request.URL.Path != "/internal/v1/fetch" {
			return
		}
		body, err := io.ReadAll(c.Request.Body)
		require.NoError(t, err)
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		var req client.FetchRequest
		if json.Unmarshal(body, &req) == nil && req.Node == "F" {
			var dbs []string
			for _, s := range req.Shards {
				dbs = append(dbs, s.DB)
			}
			slices.Sort(dbs)
			mu.Lock()
			polls = append(polls, dbs)
			mu.Unlock()
		}
	}
	seen := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(polls)
	}
	leader, _ := quietPair(t, sm, store, observe)

	publishDB(sm, "a", "ua", []string{"L", "F"}, "L", 1)
	require.Eventually(t, func() bool { return leader.host.ParkedFetches() == 1 }, 10*time.Second, 5*time.Millisecond)
	publishDB(sm, "b", "ub", []string{"L", "F"}, "L", 1) // joins by a side poll
	require.Eventually(t, func() bool { return leader.host.ParkedFetches() == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, [][]string{{"a"}, {"b"}}, seen(), "a's main poll, b's side poll")

	publishDB(sm, "a", "ua", []string{"L"}, "L", 1) // a leaves F: its main poll is re-sent with b alone
	require.Eventually(t, func() bool {
		p := seen()
		return len(p) == 3 && slices.Equal(p[2], []string{"b"})
	}, 10*time.Second, 5*time.Millisecond, "polls: %v", seen())
	require.Eventually(t, func() bool { return leader.host.ParkedFetches() == 1 }, 10*time.Second, 5*time.Millisecond,
		"only b's poll is parked at the leader")
}
