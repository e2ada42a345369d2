package master_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A node that dies and comes back leads nothing after the failover; once
// membership has been stable for the rebalance delay (on the master's clock)
// its share of every database's leaders is handed back to it.
func TestLeadersComeBackAfterRebalanceDelay(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	clock := &skewClock{}
	rm := h.startMaster(masterOpts{rebalanceDelay: time.Hour, now: clock.Now})
	h.createDB("x", 6, 3)
	h.createDB("y", 4, 3)
	// The master's first plan of the term, at a stable membership.
	clock.Advance(2 * time.Hour)
	h.settle(rm)

	victim := h.etcdStates("x").Shards[0].Leader
	h.kill(victim)
	h.eventually("failed over", func(st *statemachine.State) bool {
		_, leaders := counts(st, nodes)
		return leaders[victim] == 0 && allOnline(st, "x", 6) && allOnline(st, "y", 4)
	})
	// Back before the delay: the membership is the one last balanced.
	h.register(victim, nil)
	h.eventually("victim live", func(st *statemachine.State) bool { _, ok := st.Nodes.At(cluster).Get(victim); return ok })
	// The master dates a membership change from the pass that sees it: let
	// it see this one before the clock moves, or it would count the delay
	// from 30 minutes later and never spread within the wait below.
	h.settle(rm)
	clock.Advance(30 * time.Minute)
	h.settle(rm)
	_, leaders := counts(h.sm.Snapshot(), nodes)
	require.Zero(t, leaders[victim], "leaders moved before membership was stable for the delay")

	clock.Advance(31 * time.Minute)
	h.eventually("every database's leaders spread max - min <= 1", func(st *statemachine.State) bool {
		for db, n := range map[string]int{"x": 6, "y": 4} {
			if !allOnline(st, db, n) {
				return false
			}
			per := map[string]int{"n1": 0, "n2": 0, "n3": 0}
			for _, s := range st.ShardStates.At(db).Shards {
				per[s.Leader]++
			}
			if spread(per, nodes) > 1 {
				return false
			}
		}
		return true
	})
	// Spread, it stays put.
	before := h.etcdStates("x")
	h.settle(rm)
	require.Equal(t, before, h.etcdStates("x"))
}

// For one liveness grace after its state is complete, a new master changes no
// leader: a node missing from the live set may still be re-registering (a
// restored etcd starts without any node record).
func TestNoFailoverWithinLivenessGrace(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.createDBDirect("g", 2, []string{"n1", "n2"}, "n1")
	clock := &skewClock{}
	h.kill("n1")
	h.eventually("n1 gone", func(st *statemachine.State) bool { _, ok := st.Nodes.At(cluster).Get("n1"); return !ok })
	rm := h.startMaster(masterOpts{now: clock.Now, grace: time.Hour})
	h.settle(rm)
	for _, s := range h.etcdStates("g").Shards {
		require.Equal(t, "n1", s.Leader, "leader changed within the grace")
		require.Equal(t, int64(1), s.Term)
	}
	clock.Advance(time.Hour)
	h.eventually("failed over after the grace", func(st *statemachine.State) bool {
		return noneLedBy(st.ShardStates.At("g"), "n1") && allOnline(st, "g", 2)
	})
}

// createDBDirect writes a database with every shard on replicas and led by
// leader at term 1, as a previous master would have left it.
func (h *harness) createDBDirect(name string, shards int, replicas []string, leader string) {
	h.t.Helper()
	db := models.Database{Name: name, StorageCluster: cluster, NumShards: shards, ReplicaFactor: len(replicas), Options: map[string]any{}}
	a := models.Assignment{DB: name, Cluster: cluster}
	ss := models.ShardStates{DB: name}
	for i := range shards {
		a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: replicas})
		ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: leader, Term: 1, Status: models.StatusOnline})
	}
	h.putDatabases([]models.Database{db}, []models.Assignment{a}, []models.ShardStates{ss})
	h.eventually("database loaded", func(st *statemachine.State) bool {
		_, ok := st.Databases.Get(name)
		return ok && allOnline(st, name, shards)
	})
}

// A master whose state shows an assignment without its database config
// (watched apart: a restore writes both at once and the config may show up
// second) drops the assignment only if the config is really absent in etcd.
func TestAssignmentKeptWhileItsDatabaseExistsInEtcd(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.createDBDirect("kept", 2, []string{"n1", "n2"}, "n1")
	// A state manager whose database source lags forever: it lists an
	// empty prefix under the database source's name.
	blind := statemachine.New(statemachine.Config{Logger: logger(t)})
	blind.Start(context.Background())
	t.Cleanup(blind.Stop)
	for _, src := range statemachine.MainSources(h.store, h.keys) {
		if src.Name == statemachine.SourceDatabaseConfig {
			src.Prefix = "/elsewhere/"
		}
		blind.AddSource(src)
	}
	for _, src := range statemachine.ClusterSources(h.store, cluster, h.ck) {
		blind.AddSource(src)
	}
	rm := h.startMaster(masterOpts{sm: blind})
	h.settle(rm)
	h.settle(rm)
	kv, err := h.store.Get(context.Background(), h.keys.Assign("kept"))
	require.NoError(t, err)
	require.NotNil(t, kv, "the assignment of a database present in etcd was dropped")
	// Really gone: the assignment goes.
	_, err = h.store.Delete(context.Background(), h.keys.DatabaseConfig("kept"))
	require.NoError(t, err)
	h.eventually("assignment dropped", func(st *statemachine.State) bool { _, ok := st.Assignments.Get("kept"); return !ok })
}
