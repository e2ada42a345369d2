package problems

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// zoned is cluster with failure_domain zone and each live node's zone.
func zoned(zones map[string]string, rf int, shards ...[]string) *statemachine.State {
	var live []string
	for id := range zones {
		live = append(live, id)
	}
	st := cluster(rf, live, shards...)
	st.StorageClusters["c"] = models.StorageCluster{Name: "c", FailureDomain: "zone"}
	for id, z := range zones {
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id, Labels: map[string]string{"zone": z}})
	}
	return st
}

func TestDomainConstraintUnmet(t *testing.T) {
	three := map[string]string{"a1": "a", "a2": "a", "b1": "b", "c1": "c"}
	ps := Compute(Input{State: zoned(three, 3, []string{"a1", "b1", "c1"}), Now: now, EtcdUp: true})
	require.Empty(t, kinds(ps), "one replica per zone")

	ps = Compute(Input{State: zoned(three, 3, []string{"a1", "b1", "c1"}, []string{"b1", "a1", "a2"}), Now: now, EtcdUp: true})
	require.Equal(t, []string{"warning:domain_constraint_unmet:db"}, kinds(ps))
	require.Equal(t, 1, ps[0].Count)
	require.Contains(t, ps[0].Message, "1 of 2 shards have two replicas in one zone (a rebalance moves them apart)")

	two := map[string]string{"a1": "a", "a2": "a", "b1": "b"}
	ps = Compute(Input{State: zoned(two, 3, []string{"a1", "a2", "b1"}), Now: now, EtcdUp: true})
	require.Equal(t, []string{"warning:domain_constraint_unmet:db"}, kinds(ps))
	require.Contains(t, ps[0].Message, "span 2 zone value(s) for replica factor 3")

	// Without a failure domain, sharing a zone is no problem.
	st := zoned(two, 3, []string{"a1", "a2", "b1"})
	st.StorageClusters["c"] = models.StorageCluster{Name: "c"}
	require.Empty(t, kinds(Compute(Input{State: st, Now: now, EtcdUp: true})))
}
