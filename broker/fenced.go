package broker

import (
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// noWritableReplica says, for a shard whose leader refused a write for lack
// of storage (it fenced itself off writes: a full or failing disk), whether
// no other replica can take its leadership over: none of the shard's other
// live replicas in its in-sync set takes writes. The refusal is then final
// and answered at once (507): the master leaves such a shard with its
// fenced leader, so waiting for a failover would only end in a timeout.
func noWritableReplica(st *statemachine.State, cfg models.Database, shard int, leader string) bool {
	a, ok := st.Assignments.Get(cfg.Name)
	if !ok {
		return false
	}
	i := slices.IndexFunc(a.Shards, func(s models.ShardAssignment) bool { return s.ID == shard })
	if i < 0 {
		return false
	}
	inSync := a.Shards[i].Replicas
	s, _ := st.ShardState(cfg.Name, shard)
	if set, ok := st.ISR.At(cfg.StorageCluster).Get(models.ShardID(cfg.Name, shard)); ok && set.Term == s.Term {
		inSync = set.Replicas
	}
	nodes := st.Nodes.At(cfg.StorageCluster)
	for _, r := range a.Shards[i].Replicas {
		if n, live := nodes.Get(r); r != leader && live && n.Writable() && slices.Contains(inSync, r) {
			return false
		}
	}
	return true
}
