package master

import (
	"reflect"

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
	leadsKey [2]uintptr // identity of ShardStates and Assignments
	leads    map[string]map[string]int
	termsKey uintptr // identity of the cluster's live nodes map
	termsOf  string  // that cluster
	terms    map[string]int64
}

func identity(m any) uintptr { return reflect.ValueOf(m).Pointer() }

// failoverInputs is FailoverInputs(st, db) with the recorded terms computed
// once per version of the live nodes, and without Leads: the caller adds
// them (clusterLeads) once a shard needs a leader.
func (d *derived) failoverInputs(st *statemachine.State, db string) (ShardInputs, bool) {
	a, ok := st.Assignments[db]
	if !ok || !ClusterReady(st, a.Cluster) {
		return ShardInputs{}, false
	}
	return ShardInputs{DB: db, Assign: a, States: st.ShardStates[db],
		Live: st.Nodes[a.Cluster], ISR: st.ISR[a.Cluster], Drains: st.Drains,
		ClusterID:     st.ListedFrom[statemachine.ClusterISRSource(a.Cluster)],
		RecordedTerms: d.recordedTerms(st.Nodes[a.Cluster], a.Cluster)}, true
}

// clusterLeads is a copy of ClusterLeads for the cluster (PlanLeaders
// updates the map it is given).
func (d *derived) clusterLeads(st *statemachine.State, cluster string) map[string]int {
	key := [2]uintptr{identity(st.ShardStates), identity(st.Assignments)}
	if d.leads == nil || key != d.leadsKey {
		d.leadsKey, d.leads = key, map[string]map[string]int{}
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

// recordedTerms is, per shard id, the highest max_term in the live nodes'
// records of one cluster.
func (d *derived) recordedTerms(live map[string]models.StorageNode, cluster string) map[string]int64 {
	if key := identity(live); d.terms == nil || key != d.termsKey || cluster != d.termsOf {
		d.termsKey, d.termsOf, d.terms = key, cluster, map[string]int64{}
		for _, n := range live {
			for id, t := range n.MaxTerm {
				d.terms[id] = max(d.terms[id], t)
			}
		}
	}
	return d.terms
}
