package app

import (
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/statemachine"
)

// previousProtocol is the node-to-node protocol before this one: its nodes
// sign and accept version 2 proofs only (COMPATIBILITY.md).
const previousProtocol = 2

// proofVersion is the proof the node with id node accepts, from the
// protocol its records advertise: version 2 for a node of protocol 2,
// version 3 otherwise (also for a node this one has no record of:
// the bound proof is never downgraded on a guess).
func (a *App) proofVersion(node string) int {
	if a.sm == nil {
		return peerauth.V3
	}
	if p, ok := advertisedProtocol(a.sm.Snapshot(), node); ok && p == previousProtocol {
		return peerauth.V2
	}
	return peerauth.V3
}

// rollFromV2 reports whether a live node advertises protocol 2 (a roll from
// it is under way): only then does this node accept version 2 proofs (bound to its
// address, not its id), and it warns while it does.
func (a *App) rollFromV2() bool {
	return a.sm != nil && anyAdvertises(a.sm.Snapshot(), previousProtocol)
}

// advertisedProtocol is the protocol in node's records (master, broker,
// storage); false when st holds none.
func advertisedProtocol(st *statemachine.State, node string) (int, bool) {
	if st.Master != nil && st.Master.NodeID == node {
		return st.Master.Protocol, true
	}
	if b, ok := st.Brokers[node]; ok {
		return b.Protocol, true
	}
	for _, nodes := range st.Nodes.All() {
		if n, ok := nodes.Get(node); ok {
			return n.Protocol, true
		}
	}
	return 0, false
}

// anyAdvertises reports whether a record in st advertises protocol p.
func anyAdvertises(st *statemachine.State, p int) bool {
	if st.Master != nil && st.Master.Protocol == p {
		return true
	}
	for _, b := range st.Brokers {
		if b.Protocol == p {
			return true
		}
	}
	for _, nodes := range st.Nodes.All() {
		for _, n := range nodes.All() {
			if n.Protocol == p {
				return true
			}
		}
	}
	return false
}
