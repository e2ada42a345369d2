package master_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// One database whose shard states cannot be decoded (so every failover write
// for it fails its compare) must not delay the failover of another: "a" sorts
// first, and a pass that stopped at its error never reached "b". The stuck
// database's repeated error is logged once per interval, not once per pass.
func TestPoisonedDatabaseDoesNotStallOthers(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	core, logs := observer.New(zapcore.WarnLevel)
	rm := h.startMaster(masterOpts{logger: zap.New(core)})
	h.admin.Master = rm
	h.createDB("a", 3, 2)
	h.createDB("b", 2, 2)
	victim := h.etcdStates("b").Shards[0].Leader
	shard := -1
	for _, sh := range h.sm.Snapshot().Assignments.At("a").Shards {
		if slices.Contains(sh.Replicas, victim) {
			shard = sh.ID
		}
	}
	require.GreaterOrEqual(t, shard, 0, "%s holds no replica of a", victim)
	code, body := h.do(http.MethodPost, fmt.Sprintf("/api/v1/databases/a/shards/%d/leader", shard), map[string]any{"node_id": victim})
	require.Equal(t, http.StatusAccepted, code, body)
	h.waitShard("a", shard, "victim leads a shard of a", func(s models.ShardState) bool { return s.Leader == victim })

	// Poison a's shard states: the local state keeps the last good value, at
	// a mod revision that no longer matches etcd.
	good := h.sm.Snapshot().ModRev(statemachine.SourceShardState, "a")
	rev, err := h.store.Put(context.Background(), h.keys.ShardState("a"), []byte(`{"db":"a","shards":"not a list"}`), 0)
	require.NoError(t, err)
	h.eventually("poisoned value seen by the watchers", func(st *statemachine.State) bool {
		return st.Revisions[statemachine.SourceShardState] >= rev
	})
	require.Equal(t, good, h.sm.Snapshot().ModRev(statemachine.SourceShardState, "a"), "an undecodable value is not adopted")

	h.kill(victim)
	h.eventually("b failed over despite a", func(st *statemachine.State) bool {
		for _, s := range st.ShardStates.At("b").Shards {
			if s.Leader == victim || s.Status != models.StatusOnline {
				return false
			}
		}
		return true
	})
	// a cannot fail over (its value is not readable) and says so, once.
	require.Eventually(t, func() bool {
		return logs.FilterMessage("database reconcile failed; retrying").FilterField(zap.String("db", "a")).Len() >= 1
	}, waitFor, pollTick)
	h.settle(rm)
	h.settle(rm)
	fails := logs.FilterMessage("database reconcile failed; retrying").FilterField(zap.String("db", "a")).All()
	require.LessOrEqual(t, len(fails), 2, "a repeated error is logged once per interval")
	require.Contains(t, fails[0].ContextMap()["error"], h.keys.ShardState("a")+": json: cannot unmarshal")
	require.Contains(t, fails[0].ContextMap()["error"], "fix or delete the key")
	require.Zero(t, logs.FilterField(zap.String("db", "b")).Len(), "b had no error")

	// Once a's value is readable again, a fails over too.
	fixed := h.etcdStates("b") // any valid value of the right shape
	fixed.DB = "a"
	fixed.Shards = append(fixed.Shards, models.ShardState{ID: 2})
	for i := range fixed.Shards {
		fixed.Shards[i] = models.ShardState{ID: i, Leader: victim, Term: 1, Status: models.StatusOnline}
	}
	_, err = h.store.Put(context.Background(), h.keys.ShardState("a"), mustJSON(t, fixed), 0)
	require.NoError(t, err)
	h.eventually("a failed over once readable", func(st *statemachine.State) bool {
		for _, s := range st.ShardStates.At("a").Shards {
			if s.Leader == victim || s.Status != models.StatusOnline {
				return false
			}
		}
		return true
	})
}
