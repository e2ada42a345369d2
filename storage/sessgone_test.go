package storage

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/stretchr/testify/require"
)

// A host looks for sessions whose leader is gone among the nodes that
// changed since its last look, and at every session when one was created
// since (its leader may have gone before): a leader deleted, or live at
// another address, ends its session; others are not looked at again.
func TestSessionsGoneLooksAtChangedNodes(t *testing.T) {
	peer := func(id, addr string) client.Peer { return client.Peer{ID: id, Address: addr} }
	nodes := func(addrs map[string]string) statemachine.Map[models.StorageNode] {
		m := map[string]models.StorageNode{}
		for id, a := range addrs {
			m[id] = models.StorageNode{NodeID: id, NodeAddress: a}
		}
		return statemachine.MapOf(m)
	}
	sessions := map[client.Peer]*fetchSession{}
	add := func(p client.Peer) {
		sessions[p] = &fetchSession{peer: p}
	}
	h := &Host{sessions: sessions}
	look := func(live statemachine.Map[models.StorageNode]) []string {
		h.sessMu.Lock()
		defer h.sessMu.Unlock()
		var out []string
		for _, s := range h.goneLocked(live) {
			out = append(out, s.peer.ID+"@"+s.peer.Address)
		}
		return out
	}
	add(peer("a", "h:1"))
	add(peer("b", "h:2"))
	add(peer("c", "h:3"))
	h.sessGen = 3
	// The first look takes every session: c was never live at h:3.
	live := nodes(map[string]string{"a": "h:1", "b": "h:2", "c": "h:9"})
	require.Equal(t, []string{"c@h:3"}, look(live))
	// Nothing changed: nothing looked at (c's session, still there, is
	// not handed back again).
	require.Empty(t, look(live))
	// b left: only its session.
	live = live.Delete("b")
	require.Equal(t, []string{"b@h:2"}, look(live))
	// a's record rewritten at the same address: not gone.
	live = live.Set("a", models.StorageNode{NodeID: "a", NodeAddress: "h:1", LastUpdated: 7})
	require.Empty(t, look(live))
	// A session created since the last look, to a leader already gone:
	// every session is looked at again.
	delete(sessions, peer("b", "h:2"))
	delete(sessions, peer("c", "h:3"))
	add(peer("d", "h:4"))
	h.sessGen++
	require.Equal(t, []string{"d@h:4"}, look(live))
	// a moved to another address.
	live = live.Set("a", models.StorageNode{NodeID: "a", NodeAddress: "h:5"})
	require.Equal(t, []string{"a@h:1"}, look(live))
}
