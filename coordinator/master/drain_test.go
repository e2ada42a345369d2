package master_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func TestDrainAndUndrain(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	rest := nodes[1:]
	h := newHarness(t, nodes...)
	rm := h.startMaster(masterOpts{})
	h.admin.Master = rm
	assigns := h.collect(h.keys.AssignPrefix())
	h.createDB("dr", 8, 2)
	h.createDB("dr2", 3, 3)
	want := map[string]int{"dr": 2, "dr2": 3}

	code, body := h.do(http.MethodPost, "/api/v1/nodes/n1/drain", nil)
	require.Equal(t, http.StatusAccepted, code, body)
	h.eventually("n1 holds and leads nothing", func(st *statemachine.State) bool {
		replicas, leaders := counts(st, nodes)
		return replicas["n1"] == 0 && leaders["n1"] == 0 && allOnline(st, "dr", 8) && allOnline(st, "dr2", 3)
	})
	replicas, leaders := counts(h.sm.Snapshot(), nodes)
	t.Logf("drained: replicas %v leaders %v", replicas, leaders)
	require.LessOrEqual(t, spread(replicas, rest), 1, "replicas per node %v", replicas)
	require.LessOrEqual(t, spread(leaders, rest), 1, "leaders per node %v", leaders)
	checkPlacement(t, h.shards("dr"), 8, 2, 0)
	checkPlacement(t, h.shards("dr2"), 3, 3, 0)

	// Replicas are added before any is removed: no assignment ever written
	// left a shard short of its replica factor.
	history := assigns.all(t)
	require.NotEmpty(t, history)
	for _, kv := range history {
		var a models.Assignment
		require.NoError(t, json.Unmarshal(kv.Value, &a))
		for _, sh := range a.Shards {
			require.GreaterOrEqual(t, len(sh.Replicas), want[a.DB], "%s/%d at revision %d: %v", a.DB, sh.ID, kv.ModRev, sh.Replicas)
		}
	}

	code, body = h.do(http.MethodPost, "/api/v1/nodes/n1/undrain", nil)
	require.Equal(t, http.StatusAccepted, code, body)
	h.eventually("drain mark gone", func(st *statemachine.State) bool { return len(st.Drains) == 0 })
	code, body = h.do(http.MethodPost, "/api/v1/rebalance", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"relocations"`)
	h.eventually("balanced over all nodes", func(st *statemachine.State) bool {
		replicas, _ := counts(st, nodes)
		for _, sh := range st.Assignments.At("dr").Shards {
			if len(sh.Replicas) != 2 {
				return false
			}
		}
		return spread(replicas, nodes) <= 1 && allOnline(st, "dr", 8)
	})
	h.eventually("leadership balanced over all nodes", func(st *statemachine.State) bool {
		_, leaders := counts(st, nodes)
		return spread(leaders, nodes) <= 1
	})
	replicas, leaders = counts(h.sm.Snapshot(), nodes)
	t.Logf("undrained and rebalanced: replicas %v leaders %v", replicas, leaders)
	require.Positive(t, replicas["n1"])
	for _, kv := range assigns.all(t) {
		var a models.Assignment
		require.NoError(t, json.Unmarshal(kv.Value, &a))
		for _, sh := range a.Shards {
			require.GreaterOrEqual(t, len(sh.Replicas), want[a.DB], "%s/%d at revision %d", a.DB, sh.ID, kv.ModRev)
			uniq := slices.Clone(sh.Replicas)
			slices.Sort(uniq)
			require.Len(t, slices.Compact(uniq), len(sh.Replicas))
		}
	}
}
