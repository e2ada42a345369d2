package storage

import (
	"time"

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

// gateParts tells the replica's shard the length of its sealed partitions
// (file format 4): the database's (7 days for one kept forever, as
// InfluxDB's shard group duration for an infinite retention: its reads
// still skip the old partitions and its shard file keeps the recent points
// only; with a retention, expiry drops whole files too), and only while
// every replica of the shard has a live record advertising
// models.ProtocolPartitions or later, for the same reasons as gatePacks; 0
// (seal none) otherwise. At least an hour (as InfluxDB's shard duration): a
// shorter one would make a file of every few minutes of points.
func (h *Host) gateParts(r *replica, st *statemachine.State, replicas []string) {
	sl, ok := r.eng.(engine.Sealer)
	if !ok {
		return
	}
	var d time.Duration
	if db, ok := st.Databases.Get(r.db); ok && db.UID == r.uid &&
		allSpeak(st.Nodes.At(h.cluster), replicas, models.ProtocolPartitions) {
		d = max(db.PartitionLength(), time.Hour)
	}
	sl.SetPartitionLength(d)
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
