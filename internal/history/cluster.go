package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
)

// Peer is another live node whose ring Cluster fetches.
type Peer struct {
	NodeID  string
	Address string
}

// Cluster gathers the rings of every live node: this node's own and each
// peer's, fetched from its GET /internal/v1/history (node-to-node: signed
// with the cluster secret when one is set, https when TLS is on). The browser talks
// to one node only (peers' addresses may not be reachable from it), so the
// node it talks to does the fan-out.
type Cluster struct {
	Self  *Recorder
	Peers func() []Peer // live nodes other than this one
	// Fetch gets the ring of the node p as JSON of at most limit bytes
	// (storage/client's History); each fetch is bounded by Timeout.
	Fetch   func(ctx context.Context, p Peer, limit int64) ([]byte, error)
	Timeout time.Duration // default 2s
	// MaxPeers bounds the fan-out; default 64. Nodes beyond it are left out
	// and the answer says so.
	MaxPeers int
}

// ErrBadPeerAnswer: a peer answered something that is not a valid ring.
var ErrBadPeerAnswer = errors.New("history: bad answer from peer")

// maxPeerBody bounds one peer's answer (a full ring is about 300 KB).
const maxPeerBody = 4 << 20

// Collect returns every node's ring, this node first, peers by node id.
func (c *Cluster) Collect(ctx context.Context) models.HistoryCluster {
	out := models.HistoryCluster{Series: Names, Nodes: []models.HistoryNode{{HistorySeries: c.Self.Snapshot()}}}
	var peers []Peer
	if c.Peers != nil {
		peers = c.Peers()
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].NodeID < peers[j].NodeID })
	limit := c.MaxPeers
	if limit <= 0 {
		limit = 64
	}
	if len(peers) > limit {
		peers, out.Truncated = peers[:limit], true
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	res := make([]models.HistoryNode, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			s, err := c.fetch(fctx, p)
			res[i] = models.HistoryNode{HistorySeries: s, Address: p.Address}
			if err != nil {
				res[i] = models.HistoryNode{HistorySeries: models.HistorySeries{NodeID: p.NodeID}, Address: p.Address, Error: err.Error()}
			}
		}()
	}
	wg.Wait()
	out.Nodes = append(out.Nodes, res...)
	return out
}

func (c *Cluster) fetch(ctx context.Context, p Peer) (models.HistorySeries, error) {
	body, err := c.Fetch(ctx, p, maxPeerBody)
	if err != nil {
		return models.HistorySeries{}, fmt.Errorf("node %s: %w", p.NodeID, err)
	}
	var s models.HistorySeries
	if err := json.Unmarshal(body, &s); err != nil {
		return models.HistorySeries{}, fmt.Errorf("%w: node %s: %w", ErrBadPeerAnswer, p.NodeID, err)
	}
	if err := validate(&s, p.NodeID); err != nil {
		return models.HistorySeries{}, err
	}
	return s, nil
}

// validate checks a peer's ring before it is passed on: the node it claims
// to be, a bounded length, and columns as long as the time axis.
func validate(s *models.HistorySeries, node string) error {
	if s.NodeID != node {
		return fmt.Errorf("%w: node %s answered as %q", ErrBadPeerAnswer, node, s.NodeID)
	}
	if len(s.Time) > MaxSamples {
		return fmt.Errorf("%w: node %s sent %d samples, at most %d", ErrBadPeerAnswer, node, len(s.Time), MaxSamples)
	}
	known := make(map[string][]*float64, len(Names))
	for _, name := range Names {
		col, ok := s.Values[name]
		if !ok {
			col = make([]*float64, len(s.Time)) // an older node without this series
		}
		if len(col) != len(s.Time) {
			return fmt.Errorf("%w: node %s: series %s has %d values for %d times", ErrBadPeerAnswer, node, name, len(col), len(s.Time))
		}
		known[name] = col
	}
	s.Values = known // unknown series are dropped
	return nil
}
