package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// Shards joining a follower's session one after another, each while the
// session's poll is parked at the leader (a cluster being placed: one
// shard a new database), cost the leader one shard fetched per join, not a
// re-send of every shard of the session (k²/2 for k joins). Every joined
// shard is parked at the leader meanwhile (it counts as fetching for the
// in-sync upkeep), and once written, every shard's write reaches the
// follower.
func TestShardsJoiningASessionCostOneFetchEach(t *testing.T) {
	store, sm := memState(t)

	var sent atomic.Int64 // shards asked for in the leader's batched fetches
	count := func(c *gin.Context) {
		if c.Request.URL.Path != "/internal/v1/fetch" {
			return
		}
		body, err := io.ReadAll(c.Request.Body)
		require.NoError(t, err)
		var req client.FetchRequest
		if json.Unmarshal(body, &req) == nil {
			sent.Add(int64(len(req.Shards)))
		}
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
	}
	leader, follower := quietPair(t, sm, store, count)

	const joins = 12
	db := func(i int) string { return fmt.Sprintf("j%02d", i) }
	for i := range joins {
		publishDB(sm, db(i), "u"+db(i), []string{"L", "F"}, "L", 1)
		require.Eventually(t, func() bool { return leader.host.ParkedFetches() == i+1 }, 10*time.Second, 5*time.Millisecond,
			"every joined shard has a fetch parked at the leader")
	}
	require.LessOrEqual(t, sent.Load(), int64(2*joins), "shards fetched for %d joins", joins)

	ctx := context.Background()
	for i := range joins {
		require.Eventually(t, func() bool { return leader.host.Write(ctx, db(i), 0, 1, points(i, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
		fs, err := follower.eng.Open(db(i), 0)
		require.NoError(t, err)
		require.EqualValues(t, 1, fs.LastTxnID(), "%s: the acknowledged write is on the follower", db(i))
	}
	// Written again after the joins' polls folded into one: still there.
	for i := range joins {
		require.Eventually(t, func() bool { return leader.host.Write(ctx, db(i), 0, 1, points(100+i, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
		fs, err := follower.eng.Open(db(i), 0)
		require.NoError(t, err)
		require.EqualValues(t, 2, fs.LastTxnID(), "%s", db(i))
	}
	require.Eventually(t, func() bool { return leader.host.ParkedFetches() == joins }, 10*time.Second, 5*time.Millisecond)
}

// quietPair starts a leader L (mw before its handlers) and a follower F,
// both live in the default cluster, whose polls park a minute: no poll
// ends by itself during a test.
func quietPair(t *testing.T, sm *statemachine.Manager, store kv.Store, mw ...gin.HandlerFunc) (leader, follower *node) {
	t.Helper()
	start := func(id string, mw ...gin.HandlerFunc) *node {
		eng, err := engine.NewBoltEngine(t.TempDir())
		require.NoError(t, err)
		cfg := hostConfig(id, "", sm, store, eng)
		cfg.FetchWait = time.Minute
		n, _ := runHost(t, cfg, mw...)
		return n
	}
	leader, follower = start("L", mw...), start("F")
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", leader.addr())
	live(t, store, "/t/storage/default", "F", follower.addr())
	return leader, follower
}
