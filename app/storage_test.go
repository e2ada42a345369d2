package app

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

func sourceNames(a *App) []string {
	var names []string
	for _, s := range a.sm.Sources() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// A storage-only node watches its cluster's assignments, shard states and
// live nodes (with the database and storage configs and the master key),
// never the in-sync sets nor the brokers; it still registers, becomes ready,
// and hosts and follows shards. The master and broker process watches
// everything.
func TestStorageNodeWatchesOnlyWhatItHosts(t *testing.T) {
	c := startTestCluster(t, nil)
	require.Eventually(t, func() bool {
		return slices.Equal([]string{statemachine.SourceAssign, statemachine.SourceDatabaseConfig, statemachine.SourceMaster,
			statemachine.ClusterNodesSource("default"), statemachine.SourceShardState, statemachine.SourceStorageConfig}, sourceNames(c.peer))
	}, 10*time.Second, 20*time.Millisecond, "the storage-only node's sources: %v", sourceNames(c.peer))
	require.Contains(t, sourceNames(c.core), statemachine.ClusterNodesSource("default"))
	require.Contains(t, sourceNames(c.core), statemachine.ClusterISRSource("default"))
	require.Contains(t, sourceNames(c.core), statemachine.SourceBrokers)
	require.Eventually(t, func() bool { return c.getJSON(c.peer, "/api/v1/ready", &map[string]any{}) == 200 },
		20*time.Second, 20*time.Millisecond, "the storage-only node becomes ready (it registers)")

	// Both nodes host a replica of each shard: the peer follows the
	// shards the core leads and leads the others, and every in-sync set
	// holds both (the followers found their leaders' addresses).
	c.createDB("w", 4, 2)
	require.Eventually(t, func() bool {
		st := c.core.State()
		n := 0
		for _, set := range st.ISR.At("default").All() {
			if len(set.Replicas) == 2 {
				n++
			}
		}
		return n == 4 && c.peer.host.Hosted() == 4
	}, 30*time.Second, 20*time.Millisecond)
	// Its copy of the live nodes follows the watch (a record rewritten
	// under load is seen a moment later).
	require.Eventually(t, func() bool { return c.peer.State().Nodes.At("default").Len() == 2 }, 10*time.Second, 20*time.Millisecond,
		"a storage-only node sees its cluster's live nodes")
	st := c.peer.State()
	require.Zero(t, st.ISR.Len(), "but no in-sync sets")
	require.Len(t, st.Assignments.At("w").Shards, 4)
	c.write("w", "cpu,host=a v=1 1700000000000000000\ncpu,host=b v=2 1700000000000000000\n")
}

// GET /api/v1/databases/{db}/shards?progress=true asks the storage nodes for
// every replica's last txn id (nothing in etcd holds it): after writes the
// followers show the leader's position, and asking writes nothing to etcd.
func TestShardProgressAskedOfTheNodes(t *testing.T) {
	c := startTestCluster(t, nil)
	c.createDB("p", 2, 2)
	for i := range 4 {
		c.write("p", fmt.Sprintf("cpu,host=h%d v=1 1700000000000000000\n", i))
	}
	type view struct {
		ID         int                          `json:"id"`
		Replicas   []string                     `json:"replicas"`
		Leader     string                       `json:"leader"`
		Progress   map[string]models.ReplicaTxn `json:"progress"`
		Unanswered []string                     `json:"unanswered"`
	}
	var out struct {
		Shards []view `json:"shards"`
	}
	require.Eventually(t, func() bool {
		_, rev0, err := c.core.store.Header(context.Background())
		require.NoError(t, err)
		if c.getJSON(c.core, "/api/v1/databases/p/shards?progress=true", &out) != 200 || len(out.Shards) != 2 {
			return false
		}
		_, rev1, err := c.core.store.Header(context.Background())
		require.NoError(t, err)
		var written uint64
		for _, s := range out.Shards {
			if len(s.Unanswered) > 0 || len(s.Progress) != 2 {
				return false
			}
			lead := s.Progress[s.Leader]
			for _, n := range s.Replicas {
				if s.Progress[n].LastTxnID != lead.LastTxnID || s.Progress[n].Term != lead.Term {
					return false // a follower not caught up yet
				}
			}
			written += lead.LastTxnID
		}
		return written >= 1 && rev1 == rev0
	}, 20*time.Second, 50*time.Millisecond, "progress never showed the writes on every replica: %+v", out)

	// Without the flag nothing is asked; a bad flag is refused.
	var plain struct {
		Shards []view `json:"shards"`
	}
	require.Equal(t, 200, c.getJSON(c.core, "/api/v1/databases/p/shards", &plain))
	require.Nil(t, plain.Shards[0].Progress)
	code, body := c.do(c.core, http.MethodGet, "/api/v1/databases/p/shards?progress=maybe", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(body), `"code":"bad_request"`)
}

// TestSeriesKeyBoundsAgree: --write-max-series-key-bytes cannot be set
// above what the engine holds (config cannot import the engine).
func TestSeriesKeyBoundsAgree(t *testing.T) {
	require.Equal(t, engine.MaxSeriesKeyBytes, config.MaxSeriesKeyBytes)
	require.Less(t, config.Default().WriteMaxSeriesKeyBytes, config.MaxSeriesKeyBytes)
}
