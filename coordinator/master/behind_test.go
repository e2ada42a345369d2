package master

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestRoundKeepsItsTimeoutForStatesBehindTheRecords: a shard whose live
// replicas' records hold or accepted a term above its published one (a
// restored or rolled back state), or that has no published state, makes
// its round stale (the full timeout: NextTerm hears the answers), even with
// a trusted in-sync set; one at the newest term does not.
func TestRoundKeepsItsTimeoutForStatesBehindTheRecords(t *testing.T) {
	in := func(maxTerm, seenTerm int64, withState bool) ShardInputs {
		in := ShardInputs{DB: "d"}
		in.Assign.Shards = []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b"}}}
		if withState {
			in.States.Shards = []models.ShardState{{ID: 0, Leader: "a", Term: 5, Status: models.StatusOnline}}
		}
		in.ISR = statemachine.MapOf(map[string]models.ISR{"d/0": {Leader: "a", Term: 6, Replicas: []string{"a", "b"}}})
		in.Live = statemachine.MapOf(map[string]models.StorageNode{"b": {NodeID: "b",
			MaxTerm: map[string]int64{"d/0": maxTerm}, SeenTerm: map[string]int64{"d/0": seenTerm}}})
		return in
	}
	for _, tc := range []struct {
		name  string
		in    ShardInputs
		stale bool
	}{
		{"at the published term", in(5, 5, true), false},
		{"a record holds a newer term", in(6, 6, true), true},
		{"a record accepted a newer term", in(5, 6, true), true},
		{"no published state", in(0, 0, false), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, viewOf(tc.in, tc.in.Assign.Shards[0]).trusted, "the set itself is trusted")
			need := tc.in.needs()
			require.Len(t, need, 1, "its leader is not live")
			require.Equal(t, tc.stale, need[0].behind(tc.in))
			require.Equal(t, tc.stale, newRound([]ShardInputs{tc.in}).stale)
		})
	}
}
