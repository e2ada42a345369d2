package master_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A database dropped and created again while no master saw it gone (here:
// while none ran; live, when the delete and the create come as one change)
// finds the dropped incarnation's assignment and shard states. Storage nodes
// give no role from states of another uid, so the master replaces them: the
// new database is placed afresh and comes online under its own uid.
func TestRecreatedDatabaseIsPlacedAfresh(t *testing.T) {
	h := newHarness(t, "a", "b", "c")
	rm := h.startMaster(masterOpts{firstSets: true})
	h.createDB("re", 3, 2)
	old := h.etcdStates("re")
	require.NotEmpty(t, old.UID)
	rm.stop()
	require.NoError(t, rm.election.Close(context.Background())) // the next term campaigns now

	ctx := context.Background()
	key := h.keys.DatabaseConfig("re")
	kvp, err := h.store.Get(ctx, key)
	require.NoError(t, err)
	var db models.Database
	require.NoError(t, json.Unmarshal(kvp.Value, &db))
	_, err = h.store.Delete(ctx, key)
	require.NoError(t, err)
	db.UID = "recreated"
	_, err = h.store.Put(ctx, key, mustJSON(t, db), 0)
	require.NoError(t, err)
	h.eventually("the new config seen", func(st *statemachine.State) bool { return st.Databases.At("re").UID == "recreated" })

	h.startMaster(masterOpts{firstSets: true})
	h.eventually("the new incarnation placed and online", func(st *statemachine.State) bool {
		return st.ShardStates.At("re").UID == "recreated" && allOnline(st, "re", 3)
	})
	require.Equal(t, "recreated", h.etcdStates("re").UID)
}
