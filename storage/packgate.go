package storage

import (
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/engine"
)

// gatePacks tells the replica's shard whether its flushes may write packs
// (format 3 files): only while every replica of the shard has a live
// record advertising models.ProtocolPacks or later. A replica without a
// record (down, or not registered yet) could be of an older release, whose
// full sync from this file would be refused; so could a peer rolled back.
// Files that hold packs already stay format 3 (COMPATIBILITY.md).
func (h *Host) gatePacks(r *replica, st *statemachine.State, replicas []string) {
	pw, ok := r.eng.(engine.PackWriter)
	if !ok {
		return
	}
	pw.AllowPacks(allSpeak(st.Nodes.At(h.cluster), replicas, models.ProtocolPacks))
}

// allSpeak reports whether every node of ids has a live record of protocol
// p or later.
func allSpeak(nodes statemachine.Map[models.StorageNode], ids []string, p int) bool {
	if len(ids) == 0 {
		return false
	}
	for _, id := range ids {
		if n, live := nodes.Get(id); !live || n.Protocol < p {
			return false
		}
	}
	return true
}
