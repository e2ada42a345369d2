package storage_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// A follower that sees a new leadership before its leader's node does (every
// follower of a new database races its leader) has its batched fetch held
// at the leader until the leader takes the role up, then answered as any
// other: no error, so no per-shard pull and no back-off for a moment's lag.
// The held fetch was answered "not hosted" at once before, and the follower
// pulled the shard alone before it joined the batched fetch again.
func TestFetchHeldUntilTheLeaderTakesItsRoleUp(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	smF := statemachine.New(statemachine.Config{}) // the follower's state: ahead
	smF.Start(context.Background())
	defer smF.Stop()
	smL := statemachine.New(statemachine.Config{}) // the leader's: behind until told
	smL.Start(context.Background())
	defer smL.Stop()

	var asked atomic.Int32 // batched fetches that reached L, answered or not
	arrivals := func(c *gin.Context) {
		if c.Request.URL.Path == "/internal/v1/fetch" {
			asked.Add(1)
		}
	}
	lh, addr, counts := countedLeader(t, smL, store, arrivals)
	follower := startNode(t, "F", smF, store)
	const shards = 3
	ledByL(t, smF, store, shards, addr, follower.addr())
	put(smL, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})

	// F follows and asks L, which hosts nothing yet.
	require.Eventually(t, func() bool { return asked.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
	// L's state catches up: it takes up its leaderships, and the held fetch
	// carries every write to F.
	ledByL(t, smL, store, shards, addr, follower.addr())
	ctx := context.Background()
	for i := range shards {
		require.Eventually(t, func() bool { return lh.Write(ctx, "d", i, 1, points(0, 10)) == nil }, 10*time.Second, 10*time.Millisecond)
	}
	for i := range shards {
		fs, err := follower.eng.Open("d", i)
		require.NoError(t, err)
		require.EqualValues(t, 1, fs.LastTxnID(), "shard %d: the acknowledged write is on the follower", i)
		require.Equal(t, []string{"L", "F"}, isrOf(t, store, i))
	}
	require.Zero(t, counts.get("/internal/v1/shards/:db/:shard/log"), "no per-shard pull")
}
