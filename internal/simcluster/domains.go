package simcluster

import "github.com/cairn-db/cairn/statemachine"

// MinMax is the smallest and largest of some counts.
type MinMax struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// domainsPerShard is the fewest and most zones the replicas of a shard span,
// each replica's zone taken from zoneOf (the simulation's own table: a node
// whose lease lapsed a moment ago has no live record to read it from, and
// counting it as zone "" would say nothing of the placement).
func domainsPerShard(st *statemachine.State, zoneOf map[string]string) *MinMax {
	var mm *MinMax
	for _, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			zones := map[string]bool{}
			for _, id := range sh.Replicas {
				zones[zoneOf[id]] = true
			}
			if mm == nil {
				mm = &MinMax{Min: len(zones), Max: len(zones)}
			}
			mm.Min, mm.Max = min(mm.Min, len(zones)), max(mm.Max, len(zones))
		}
	}
	return mm
}
