package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// Where a storage node finds its peers. A real storage process watches its
// cluster's live nodes: their records change only on a join, a leave or a
// real change (liveness is the lease), so that costs nothing at idle, and a
// move of a leader's node id (a copy of its data dir, a real move) reaches
// its followers at once (watchPeers). Without that watch (a host whose
// process does not keep the live nodes) the host asks etcd for
// the few records it needs, when it needs them: the address of a leader it
// starts following (remembered until fetching from that address fails) and,
// when it starts leading a shard, which of the shard's other replicas are
// live.

// ErrPeerNotLive: the storage node has no live record in the cluster.
var ErrPeerNotLive = errors.New("storage: peer node not live")

// ErrBadRecord: a peer's node record in etcd did not decode or names no address.
var ErrBadRecord = errors.New("storage: unreadable node record")

// peerRecord reads a node's live record; nil when there is none.
func (h *Host) peerRecord(ctx context.Context, id string) (*models.StorageNode, error) {
	kvp, err := h.store.Get(ctx, h.ck.Node(id))
	if err != nil {
		return nil, err
	}
	return h.peerOf(id, kvp)
}

// peerOf decodes node id's record as read (nil: none, not live) and
// remembers its address.
func (h *Host) peerOf(id string, kvp *kv.KeyValue) (*models.StorageNode, error) {
	if kvp == nil {
		return nil, nil
	}
	var n models.StorageNode
	if err := json.Unmarshal(kvp.Value, &n); err != nil || n.NodeAddress == "" {
		return nil, fmt.Errorf("%w: record of node %s unreadable", ErrBadRecord, id)
	}
	h.rememberPeer(id, n.NodeAddress)
	return &n, nil
}

// liveNodes is the cluster's live nodes as this process watches them, and
// whether it does (a storage-only node watches their records' changes:
// joins, leaves, moves, never heartbeats, and so do `cairn simulate
// cluster`'s agents, through one shared watch; a host without it asks etcd).
func (h *Host) liveNodes() (statemachine.Map[models.StorageNode], bool) {
	st := h.state()
	return st.Nodes.At(h.cluster), st.Synced[statemachine.ClusterNodesSource(h.cluster)]
}

// peerCanSync says whether node id may be in an in-sync set: live, and not
// fenced off writes by a disk fault in its record (a follower that cannot
// write holds no new entry: waiting for it would stall every write for the
// lag bound), from the watched live nodes when this process watches them,
// else assumed (a dead follower then leaves an in-sync set by not fetching
// within the window, a fenced one by not catching up).
func (h *Host) peerCanSync(id string) bool {
	nodes, watched := h.liveNodes()
	if !watched {
		return true
	}
	n, ok := nodes.Get(id)
	return ok && n.Writable()
}

// peersCame is closed when a node becomes live (Feed.peersCame); nil
// before Run or when this host does not watch the live nodes.
func (h *Host) peersCame() <-chan struct{} {
	f := h.feed.Load()
	if _, watched := h.liveNodes(); !watched || f == nil {
		return nil
	}
	return f.peersCame()
}

// peerAddress is the address of node id: from the watched live nodes, else
// from memory or from its record.
func (h *Host) peerAddress(ctx context.Context, id string) (string, error) {
	if nodes, watched := h.liveNodes(); watched {
		if n, ok := nodes.Get(id); ok && n.NodeAddress != "" {
			return n.NodeAddress, nil
		}
		return "", fmt.Errorf("%w: %s", ErrPeerNotLive, id)
	}
	h.peersMu.Lock()
	addr, ok := h.peers[id]
	h.peersMu.Unlock()
	if ok {
		return addr, nil
	}
	n, err := h.peerRecord(ctx, id)
	if err != nil {
		return "", err
	}
	if n == nil {
		return "", fmt.Errorf("%w: %s", ErrPeerNotLive, id)
	}
	return n.NodeAddress, nil
}

// maxPeers bounds the addresses remembered: beyond it the memory restarts
// (each address is asked again once).
const maxPeers = 65536

func (h *Host) rememberPeer(id, addr string) {
	h.peersMu.Lock()
	defer h.peersMu.Unlock()
	if len(h.peers) >= maxPeers {
		h.peers = map[string]string{}
	}
	h.peers[id] = addr
}

// forgetPeer drops a remembered address that failed, so that the next look
// reads the node's record again (it may have restarted elsewhere).
func (h *Host) forgetPeer(id, addr string) {
	h.peersMu.Lock()
	defer h.peersMu.Unlock()
	if h.peers[id] == addr {
		delete(h.peers, id)
	}
}

// watchPeers ends the fetch sessions to addresses no live node has any more
// (a leader that stopped, or whose node id registered again elsewhere: a copy
// of its data dir, a real move) as soon as the live nodes show it, so its
// followers look up the leader again at once, well within the catch-up
// window a new incarnation gives them before it drops them from its
// in-sync set. Only when this process watches the live nodes. The feed
// wakes it only when a live node left or moved (not for a record rewritten
// in place), and each wake costs O(this host's sessions): every host of a
// process shares the feed's one comparison of the live nodes. When a node
// became live, it wakes the leaderships that lack it (kickReturned).
func (h *Host) watchPeers(ctx context.Context, feed *Feed) {
	for ended, returned := true, true; ; {
		gone, came := feed.peersGone(), feed.peersCame()
		if nodes, watched := h.liveNodes(); watched {
			if ended {
				h.endSessionsGone(nodes)
			}
			if returned {
				h.kickReturned()
			}
		}
		ended, returned = false, false
		select {
		case <-ctx.Done():
			return
		case <-gone:
			ended = true
		case <-came:
			returned = true
		}
	}
}

// kickReturned wakes the upkeep of every leadership whose in-sync set lacks
// a replica that is live now. A set lacking only replicas that were not
// live is quiet (upkeepDelay), and a replica back after a lease blip may
// hold everything already, its poll parked at us, with no fetch ending to
// wake the upkeep that adds it back.
func (h *Host) kickReturned() {
	h.mu.RLock()
	reps := make([]*replica, 0, len(h.replicas))
	for _, r := range h.replicas {
		reps = append(reps, r)
	}
	h.mu.RUnlock()
	for _, r := range reps {
		r.mu.Lock()
		rr, lacks := r.run, false
		if rr != nil && rr.role == roleLeader && r.ls.isr != nil {
			lacks = slices.ContainsFunc(r.want.replicas, func(n string) bool {
				return !slices.Contains(r.ls.isr, n) && h.peerCanSync(n)
			})
		}
		r.mu.Unlock()
		if lacks {
			rr.kick()
		}
	}
}
