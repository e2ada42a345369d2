package problems

import (
	"fmt"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// domainProblems reports a database of a cluster with a failure domain
// whose shards have two live replicas in one domain (placement does that
// only when the live nodes span fewer domains than the replica factor, or
// until a rebalance moves them apart). A live node without the label counts
// as a domain of its own.
func domainProblems(st *statemachine.State, db models.Database) []Problem {
	a, ok := st.Assignments.Get(db.Name)
	if !ok {
		return nil
	}
	label := st.StorageClusters[a.Cluster].FailureDomain
	if label == "" {
		return nil
	}
	live := st.Nodes.At(a.Cluster)
	domainOf := func(id string) (string, bool) {
		rec, up := live.Get(id)
		if !up {
			return "", false
		}
		if d := rec.Labels[label]; d != "" {
			return d, true
		}
		return "\x00" + id, true
	}
	domains := map[string]bool{}
	for _, id := range live.Keys() {
		d, _ := domainOf(id)
		domains[d] = true
	}
	shared := 0
	for _, sh := range a.Shards {
		seen := map[string]bool{}
		for _, r := range sh.Replicas {
			d, up := domainOf(r)
			if !up {
				continue
			}
			if seen[d] {
				shared++
				break
			}
			seen[d] = true
		}
	}
	if shared == 0 {
		return nil
	}
	why := "a rebalance moves them apart"
	if len(domains) < db.ReplicaFactor {
		why = fmt.Sprintf("the live nodes span %d %s value(s) for replica factor %d: add nodes in other %ss", len(domains), label, db.ReplicaFactor, label)
	}
	return []Problem{{Severity: Warning, Kind: KindDomainUnmet, Link: "#shards/" + db.Name, DB: db.Name, Cluster: a.Cluster, Count: shared,
		Message: fmt.Sprintf("database %s: %d of %d shards have two replicas in one %s (%s)", db.Name, shared, len(a.Shards), label, why)}}
}
