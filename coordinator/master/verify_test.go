package master

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// TestPublishedStatesVerified: a publication that would give a shard's term
// a second leader, or lower it, panics in verify mode (TestMain switches it
// on) before it is written; a failover at a higher term, or another
// incarnation of the database, passes.
func TestPublishedStatesVerified(t *testing.T) {
	prev := models.ShardStates{DB: "db", UID: "u1", Shards: []models.ShardState{{ID: 0, Leader: "n1", Term: 3, Status: models.StatusOnline}}}
	next := func(leader string, term int64, uid string) models.ShardStates {
		return models.ShardStates{DB: "db", UID: uid, Shards: []models.ShardState{{ID: 0, Leader: leader, Term: term, Status: models.StatusOnline}}}
	}
	require.NotPanics(t, func() { verifyStates(prev, next("n2", 4, "u1"), []int{0}) })
	require.NotPanics(t, func() { verifyStates(prev, next("n2", 1, "u2"), []int{0}) })
	require.PanicsWithValue(t, "cairn invariant violated: shard db/0: term 3 has two leaders, n1 and n2",
		func() { verifyStates(prev, next("n2", 3, "u1"), []int{0}) })
	require.PanicsWithValue(t, "cairn invariant violated: shard db/0: term went down from 3 to 2",
		func() { verifyStates(prev, next("n1", 2, "u1"), []int{0}) })
}
