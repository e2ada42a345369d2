package app

import (
	"net/http"
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/internal/history"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// GET /api/v1/history on one node carries every live node's ring, fed by the
// real metrics: the standalone node's writes and both nodes' shards.
func TestHistoryAcrossNodes(t *testing.T) {
	c := startTestCluster(t, func(cfg *config.Config) { cfg.HistoryInterval = time.Second })
	c.createDB("h", 2, 2)
	ids := map[string]bool{c.core.NodeID(): true, c.peer.NodeID(): true}

	var last models.HistoryCluster
	latest := func(s models.HistoryNode, name string) *float64 {
		col := s.Values[name]
		for i := len(col) - 1; i >= 0; i-- {
			if col[i] != nil {
				return col[i]
			}
		}
		return nil
	}
	require.Eventually(t, func() bool {
		c.write("h", "cpu,host=a v=1 1700000000000000000\ncpu,host=b v=2 1700000000000000000\n")
		if c.getJSON(c.core, "/api/v1/history", &last) != 200 || len(last.Nodes) != 2 {
			return false
		}
		var shards, leaders, written float64
		for _, n := range last.Nodes {
			if !ids[n.NodeID] || n.Error != "" {
				return false
			}
			if v := latest(n, history.Shards); v != nil {
				shards += *v
			}
			if v := latest(n, history.Leaders); v != nil {
				leaders += *v
			}
			if n.NodeID == c.core.NodeID() {
				if v := latest(n, history.WritePointsPerS); v != nil {
					written = *v
				}
			}
		}
		return shards == 4 && leaders == 2 && written > 0
	}, 30*time.Second, 200*time.Millisecond, "history never showed writes and shards: %+v", last)
	require.Equal(t, history.Names, last.Series)
	require.Equal(t, c.core.NodeID(), last.Nodes[0].NodeID, "the answering node first")
	require.Equal(t, 1.0, last.Nodes[0].IntervalS)

	var own models.HistorySeries
	require.Equal(t, 200, c.getJSON(c.peer, "/api/v1/history?scope=node", &own))
	require.Equal(t, c.peer.NodeID(), own.NodeID)
	require.NotEmpty(t, own.Time)
	require.Nil(t, own.Values[history.WritePointsPerS][len(own.Time)-1], "a storage-only node has no broker writes")

	code, body := c.do(c.core, http.MethodGet, "/api/v1/history?scope=everything", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(body), `"code":"bad_request"`)
}
