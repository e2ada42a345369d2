package app

import (
	"context"
	"time"

	"github.com/cairn-db/cairn/internal/history"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
)

// nodeHistory is the web.History of a node: its own ring and the fan-out to
// every other live broker and storage node named in the state.
type nodeHistory struct {
	rec     *history.Recorder
	cluster *history.Cluster
}

func (a *App) newHistory() *nodeHistory {
	rec := history.New(history.Config{NodeID: a.nodeID, Gatherer: a.reg, Interval: a.cfg.HistoryInterval})
	peers := client.New(a.peerClient(5 * time.Second))
	fetch := func(ctx context.Context, p history.Peer, limit int64) ([]byte, error) {
		return peers.History(ctx, client.Peer{ID: p.NodeID, Address: p.Address}, limit)
	}
	return &nodeHistory{rec: rec, cluster: &history.Cluster{Self: rec, Peers: a.historyPeers, Fetch: fetch}}
}

// historyPeers lists the live brokers and storage nodes other than this one.
func (a *App) historyPeers() []history.Peer {
	st := a.sm.Snapshot()
	seen := map[string]bool{a.nodeID: true}
	var out []history.Peer
	add := func(id, addr string) {
		if !seen[id] && addr != "" {
			seen[id] = true
			out = append(out, history.Peer{NodeID: id, Address: addr})
		}
	}
	for id, b := range st.Brokers {
		add(id, b.Address)
	}
	for _, nodes := range st.Nodes.All() {
		for id, n := range nodes.All() {
			add(id, n.NodeAddress)
		}
	}
	return out
}

func (h *nodeHistory) Node() models.HistorySeries { return h.rec.Snapshot() }
func (h *nodeHistory) Cluster(ctx context.Context) models.HistoryCluster {
	return h.cluster.Collect(ctx)
}
