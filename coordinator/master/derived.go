package master

import (
	"maps"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// derived keeps what every database's failover check reads of its whole
// cluster (leaderships per node, the highest recorded log term per shard),
// computed once per version of the maps they come from rather than once per
// database: at 1,000 databases x 32 shards x 1,000 nodes, a pass recomputing
// them for each database is billions of steps. Published snapshots are never
// changed in place, so a map's identity names its content. Master's loop
// only (not safe for concurrent use).
type derived struct {
	leadsStates statemachine.Map[models.ShardStates] // the versions leads was computed from
	leadsAssign statemachine.Map[models.Assignment]
	leads       map[string]map[string]int
	termsKey    statemachine.Map[models.StorageNode] // the cluster's live nodes terms was computed from
	termsOf     string                               // that cluster
	terms       *liveTerms
	restored    map[string]restoredSets // per cluster
}

// restoredSets are the shard ids of one version of a cluster's in-sync
// sets whose record was written in another etcd cluster than id
// (ShardInputs.Restored).
type restoredSets struct {
	isr statemachine.Map[models.ISR]
	id  uint64
	ids map[string]bool
}

// failoverInputs is FailoverInputs(st, db) with the records' terms computed
// once per version of the live nodes, the restored in-sync sets once per
// version of the cluster's sets, and without Leads: the caller adds
// them (clusterLeads) once a shard needs a leader.
func (d *derived) failoverInputs(st *statemachine.State, db string) (ShardInputs, bool) {
	a, ok := st.Assignments.Get(db)
	if !ok || !ClusterReady(st, a.Cluster) {
		return ShardInputs{}, false
	}
	live := st.Nodes.At(a.Cluster)
	in := ShardInputs{DB: db, Assign: a, States: st.ShardStates.At(db),
		Live: live, ISR: st.ISR.At(a.Cluster), Drains: st.Drains,
		ClusterID: st.ListedFrom[statemachine.ClusterISRSource(a.Cluster)],
		terms:     d.liveTerms(live, a.Cluster).forDB(db)}
	d.restoredOf(&in)
	return in, true
}

// restoredOf fills in.Restored from the cluster's last known restored sets,
// brought up to date with what changed in its in-sync sets since (a walk
// of the changed sets, not of all of them).
func (d *derived) restoredOf(in *ShardInputs) {
	if in.ClusterID == 0 {
		return // restoredISR is false without a lookup
	}
	c, ok := d.restored[in.Assign.Cluster]
	switch {
	case ok && c.id == in.ClusterID && c.isr.Same(in.ISR):
	case ok && c.id == in.ClusterID:
		ids, cloned := c.ids, false
		statemachine.Changed(c.isr, in.ISR, func(id string) {
			set, ok := in.ISR.Get(id)
			if now := ok && restoredSet(*in, set); now != ids[id] {
				if !cloned {
					ids, cloned = maps.Clone(c.ids), true // handed out before: never changed in place
				}
				if now {
					ids[id] = true
				} else {
					delete(ids, id)
				}
			}
		})
		c = restoredSets{isr: in.ISR, id: in.ClusterID, ids: ids}
	default:
		c = restoredSets{isr: in.ISR, id: in.ClusterID, ids: map[string]bool{}}
		for id, set := range in.ISR.All() {
			if restoredSet(*in, set) {
				c.ids[id] = true
			}
		}
	}
	if d.restored == nil {
		d.restored = map[string]restoredSets{}
	}
	d.restored[in.Assign.Cluster] = c
	in.Restored = c.ids
}

// clusterLeads is a copy of ClusterLeads for the cluster (PlanLeaders
// updates the map it is given).
func (d *derived) clusterLeads(st *statemachine.State, cluster string) map[string]int {
	if d.leads == nil || !st.ShardStates.Same(d.leadsStates) || !st.Assignments.Same(d.leadsAssign) {
		d.leadsStates, d.leadsAssign, d.leads = st.ShardStates, st.Assignments, map[string]map[string]int{}
	}
	leads, ok := d.leads[cluster]
	if !ok {
		leads = ClusterLeads(st.ShardStates, st.Assignments, cluster)
		d.leads[cluster] = leads
	}
	out := make(map[string]int, len(leads))
	for n, c := range leads {
		out[n] = c
	}
	return out
}

// liveTerms is the terms of the live nodes' records of one cluster.
func (d *derived) liveTerms(live statemachine.Map[models.StorageNode], cluster string) *liveTerms {
	if d.terms == nil || !live.Same(d.termsKey) || cluster != d.termsOf {
		d.termsKey, d.termsOf, d.terms = live, cluster, liveTermsOf(live)
	}
	return d.terms
}

// SeenTerms is, per shard id, the highest seen_term in the records of the
// live nodes given (ShardInputs.SeenTerms).
func SeenTerms(live statemachine.Map[models.StorageNode]) map[string]int64 {
	terms := map[string]int64{}
	for _, n := range live.All() {
		for id, t := range n.SeenTerm {
			terms[id] = max(terms[id], t)
		}
	}
	return terms
}

// RecordedTerms is, per shard id, the highest max_term in the records of
// the live nodes given (ShardInputs.RecordedTerms).
func RecordedTerms(live statemachine.Map[models.StorageNode]) map[string]int64 {
	terms := map[string]int64{}
	for _, n := range live.All() {
		for id, t := range n.MaxTerm {
			terms[id] = max(terms[id], t)
		}
	}
	return terms
}
