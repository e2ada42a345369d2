package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// A follower's session with a leader that has sent it nothing parks its
// polls for the longest park from the first, and shards joining it one
// after another (a cluster being placed: one shard a new database) do not
// bring its park back to FetchWait: each such restart was one more poll per
// session ending empty after FetchWait, ~40,000 of them while 1,000
// simulated nodes were placed. Only the joins' own side polls park shorter.
// A write still reaches the follower at once, and the poll after an answer
// with entries parks FetchWait.
func TestSessionParksLongThroughJoins(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	sm := statemachine.New(statemachine.Config{})
	sm.Start(context.Background())
	defer sm.Stop()

	type poll struct {
		waitMS int64
		shards int
	}
	var mu sync.Mutex
	var polls []poll // F's batched fetches at L, in order
	observe := func(c *gin.Context) {
		if c.Request.URL.Path != "/internal/v1/fetch" {
			return
		}
		body, err := io.ReadAll(c.Request.Body)
		require.NoError(t, err)
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		var req client.FetchRequest
		if json.Unmarshal(body, &req) == nil && req.Node == "F" {
			mu.Lock()
			polls = append(polls, poll{req.WaitMS, len(req.Shards)})
			mu.Unlock()
		}
	}
	seen := func() []poll {
		mu.Lock()
		defer mu.Unlock()
		return append([]poll(nil), polls...)
	}
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	leader, _ := runNode(t, "L", "", sm, store, eng, observe)
	follower := startNode(t, "F", sm, store) // FetchWait 2s
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", leader.addr())
	live(t, store, "/t/storage/default", "F", follower.addr())

	const joins = 6
	db := func(i int) string { return fmt.Sprintf("p%02d", i) }
	for i := range joins {
		publishDB(sm, db(i), "u"+db(i), []string{"L", "F"}, "L", 1)
		require.Eventually(t, func() bool { return leader.host.ParkedFetches() == i+1 }, 10*time.Second, 5*time.Millisecond,
			"every joined shard has a fetch parked at the leader")
	}
	// Every side poll has folded back into one main poll of all the shards.
	require.Eventually(t, func() bool {
		p := seen()
		return len(p) > 0 && p[len(p)-1].shards == joins
	}, 10*time.Second, 10*time.Millisecond)

	longest := storage.IdleFetchWait.Milliseconds()
	long := func(ms int64) bool { return ms > longest*3/4 && ms <= longest } // spread by up to a quarter
	p := seen()
	require.True(t, long(p[0].waitMS), "a new session's first poll parks for the longest park, asked %d ms", p[0].waitMS)
	for i, q := range p {
		if q.shards == 1 && i > 0 {
			require.LessOrEqual(t, q.waitMS, int64(1000), "poll %d: a join's side poll parks half FetchWait at most", i)
			continue
		}
		require.True(t, long(q.waitMS), "poll %d (%d shards): joins leave the session's park alone, asked %d ms", i, q.shards, q.waitMS)
	}

	// A write reaches the parked follower at once; the poll after the
	// answer that brought it parks FetchWait.
	ctx := context.Background()
	from := len(seen())
	require.Eventually(t, func() bool { return leader.host.Write(ctx, db(0), 0, 1, points(0, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
	fs, err := follower.eng.Open(db(0), 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, fs.LastTxnID(), "the acknowledged write is on the follower")
	require.Eventually(t, func() bool { return len(seen()) > from }, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 2000, seen()[from].waitMS, "an answer with entries brings the park back to FetchWait")
}
