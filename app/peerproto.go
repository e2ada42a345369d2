package app

import (
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/statemachine"
)

// Protocols whose nodes accept only an older proof (COMPATIBILITY.md):
// release 0.1.0's records advertise none (0) and its nodes sign and accept
// version 1 proofs only; protocol 2 nodes version 2 only.
const (
	release010Protocol = 0
	protocol2          = 2
)

// proofVersion is the proof the node with id node accepts, from the
// protocol its records advertise: version 1 for a node of release 0.1.0
// (a record without a protocol), version 2 for a node of protocol 2,
// version 3 otherwise (also for a node this one has no record of:
// the bound proof is never downgraded on a guess).
func (a *App) proofVersion(node string) int {
	if a.sm == nil {
		return peerauth.V3
	}
	p, ok := advertisedProtocol(a.sm.Snapshot(), node)
	switch {
	case ok && p == release010Protocol:
		return peerauth.V1
	case ok && p == protocol2:
		return peerauth.V2
	}
	return peerauth.V3
}

// rollFrom010 reports whether a live record advertises no protocol (a node
// of release 0.1.0: a roll from it is under way): only then does this node
// accept version 1 proofs (bound to no node), and it warns while it does.
func (a *App) rollFrom010() bool {
	return a.sm != nil && anyAdvertises(a.sm.Snapshot(), release010Protocol)
}

// rollFromV2 reports whether a live node advertises protocol 2 (a roll from
// it is under way): only then does this node accept version 2 proofs (bound to its
// address, not its id), and it warns while it does.
func (a *App) rollFromV2() bool {
	return a.sm != nil && anyAdvertises(a.sm.Snapshot(), protocol2)
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
