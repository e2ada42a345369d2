package master_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestPassActsOnChangedDatabasesBetweenResyncs: with the periodic pass over
// every database an hour away, the master still acts on each database whose
// keys changed (a shard set offline gets a leader again, a database whose
// config was deleted loses its assignment, a new one is placed) and on the
// databases a lost node led, among 30 it has nothing to do for. A pass that
// skipped a changed database would leave it as it is.
func TestPassActsOnChangedDatabasesBetweenResyncs(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	const n = 30
	var dbs []models.Database
	var assign []models.Assignment
	var states []models.ShardStates
	for i := range n {
		name := fmt.Sprintf("d%02d", i)
		dbs = append(dbs, models.Database{Name: name, StorageCluster: cluster, NumShards: 2, ReplicaFactor: 2, Options: map[string]any{}})
		a := models.Assignment{DB: name, Cluster: cluster}
		ss := models.ShardStates{DB: name}
		for s := range 2 {
			r := []string{nodes[(i+s)%3], nodes[(i+s+1)%3]}
			a.Shards = append(a.Shards, models.ShardAssignment{ID: s, Replicas: r})
			ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: r[0], Term: 1, Status: models.StatusOnline})
		}
		assign, states = append(assign, a), append(states, ss)
	}
	h.putDatabases(dbs, assign, states)
	h.eventually("databases loaded", func(st *statemachine.State) bool { return st.ShardStates.Len() == n })
	rm := h.startMaster(masterOpts{resync: time.Hour})
	h.settle(rm)
	h.settle(rm)

	// A shard of d07 set offline, as an operator's restore might leave it.
	off := states[7]
	off.Shards = slices.Clone(off.Shards)
	off.Shards[0] = models.ShardState{ID: 0, Term: 1, Status: models.StatusOffline}
	_, err := h.store.Put(context.Background(), h.keys.ShardState("d07"), mustJSON(t, off), 0)
	require.NoError(t, err)
	// d11's config deleted (dropped while no master ran).
	_, err = h.store.Delete(context.Background(), h.keys.DatabaseConfig("d11"))
	require.NoError(t, err)
	h.eventually("d07's shard led again, d11's assignment dropped", func(st *statemachine.State) bool {
		s, _ := st.ShardState("d07", 0)
		_, has := st.Assignments.Get("d11")
		return s.Status == models.StatusOnline && slices.Contains(assign[7].Shards[0].Replicas, s.Leader) && !has
	})
	h.createDB("fresh", 2, 2)

	// n3 lost: every shard it led gets another leader.
	h.kill("n3")
	h.eventually("no shard led by n3", func(st *statemachine.State) bool {
		for _, ss := range st.ShardStates.All() {
			for _, s := range ss.Shards {
				if s.Leader == "n3" || s.Status != models.StatusOnline {
					return false
				}
			}
		}
		return true
	})
}
