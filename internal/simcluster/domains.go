package simcluster

import "github.com/cairn-db/cairn/statemachine"

// MinMax is the smallest and largest of some counts.
type MinMax struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// domainsPerShard is the fewest and most zones the replicas of a shard span.
func domainsPerShard(st *statemachine.State) *MinMax {
	live := st.Nodes.At("default")
	var mm *MinMax
	for _, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			zones := map[string]bool{}
			for _, id := range sh.Replicas {
				rec, _ := live.Get(id)
				zones[rec.Labels["zone"]] = true
			}
			if mm == nil {
				mm = &MinMax{Min: len(zones), Max: len(zones)}
			}
			mm.Min, mm.Max = min(mm.Min, len(zones)), max(mm.Max, len(zones))
		}
	}
	return mm
}
