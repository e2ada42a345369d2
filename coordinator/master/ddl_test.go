package master_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

var five = []string{"n1", "n2", "n3", "n4", "n5"}

// checkPlacement asserts the placement invariants of one database as the API
// shows it: distinct replicas, every shard online with a leader among them.
func checkPlacement(t *testing.T, views []models.ShardView, shards, rf int, term int64) {
	t.Helper()
	require.Len(t, views, shards)
	for _, v := range views {
		require.Len(t, v.Replicas, rf, "shard %d", v.ID)
		uniq := slices.Clone(v.Replicas)
		slices.Sort(uniq)
		require.Len(t, slices.Compact(uniq), rf, "shard %d has replicas sharing a node: %v", v.ID, v.Replicas)
		require.Equal(t, models.StatusOnline, v.Status, "shard %d", v.ID)
		require.Contains(t, v.Replicas, v.Leader, "shard %d", v.ID)
		if term > 0 {
			require.Equal(t, term, v.Term, "shard %d", v.ID)
		}
	}
}

func TestCreateDatabasePlacesBalanced(t *testing.T) {
	h := newHarness(t, five...)
	h.startMaster(masterOpts{})

	h.createDB("metrics", 7, 2)
	checkPlacement(t, h.shards("metrics"), 7, 2, 1)
	st := h.sm.Snapshot()
	replicas, leaders := counts(st, five)
	require.LessOrEqual(t, spread(replicas, five), 1, "replicas per node %v", replicas)
	require.LessOrEqual(t, spread(leaders, five), 1, "leaders per node %v", leaders)
	// The states name the incarnation they were written for.
	uid := st.Databases.At("metrics").UID
	require.NotEmpty(t, uid)
	require.Equal(t, uid, h.etcdStates("metrics").UID)

	// A second database is balanced together with the first.
	h.createDB("events", 5, 3)
	checkPlacement(t, h.shards("events"), 5, 3, 1)
	replicas, leaders = counts(h.sm.Snapshot(), five)
	require.LessOrEqual(t, spread(replicas, five), 1, "replicas per node %v", replicas)
	require.LessOrEqual(t, spread(leaders, five), 1, "leaders per node %v", leaders)
}

func TestDDLBadInputChangesNothing(t *testing.T) {
	h := newHarness(t, "n1", "n2", "n3")
	h.startMaster(masterOpts{})
	h.createDB("dup", 4, 2)

	tests := []struct {
		name, method, path string
		body               any
		status             int
		mentions           []string
	}{
		{"bad name", http.MethodPost, "/api/v1/databases", map[string]any{"name": "bad name!", "num_shards": 1}, http.StatusBadRequest, nil},
		{"zero shards", http.MethodPost, "/api/v1/databases", map[string]any{"name": "zs", "num_shards": 0}, http.StatusBadRequest, nil},
		{"unknown cluster", http.MethodPost, "/api/v1/databases", map[string]any{"name": "uc", "storage_cluster": "nope", "num_shards": 1}, http.StatusUnprocessableEntity, []string{"nope"}},
		{"duplicate", http.MethodPost, "/api/v1/databases", map[string]any{"name": "dup", "num_shards": 1}, http.StatusConflict, []string{"dup"}},
		{"malformed JSON", http.MethodPost, "/api/v1/databases", `{"name":`, http.StatusBadRequest, nil},
		{"unknown field", http.MethodPost, "/api/v1/databases", `{"name":"uf","num_shards":1,"bogus":1}`, http.StatusBadRequest, []string{"bogus"}},
		{"replica factor above live nodes", http.MethodPost, "/api/v1/databases", map[string]any{"name": "rf", "num_shards": 1, "replica_factor": 5}, http.StatusUnprocessableEntity, []string{"5", "3"}},
		{"num_shards decrease", http.MethodPatch, "/api/v1/databases/dup", map[string]any{"num_shards": 2}, http.StatusUnprocessableEntity, []string{"4", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := h.lastRev()
			code, body := h.do(tc.method, tc.path, tc.body)
			require.Equal(t, tc.status, code, body)
			var env struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &env), body)
			require.NotEmpty(t, env.Error.Code, body)
			require.NotEmpty(t, env.Error.Message, body)
			for _, m := range tc.mentions {
				require.Contains(t, env.Error.Message, m)
			}
			require.Equal(t, before, h.lastRev(), "etcd changed after a refused request")
		})
	}
	require.Len(t, h.sm.Snapshot().Databases.ToMap(), 1)
}

func TestGrowDatabase(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{})
	h.createDB("grow", 4, 2)
	ctx := context.Background()

	shards := 10
	_, err := h.admin.UpdateDatabase(ctx, "grow", models.DatabasePatch{NumShards: &shards})
	require.NoError(t, err)
	h.eventually("10 shards online", func(st *statemachine.State) bool { return allOnline(st, "grow", 10) })
	views := h.shards("grow")
	checkPlacement(t, views, 10, 2, 0)
	for _, v := range views[4:] {
		require.Equal(t, int64(1), v.Term, "new shard %d starts at term 1", v.ID)
	}
	replicas, leaders := counts(h.sm.Snapshot(), nodes)
	require.LessOrEqual(t, spread(replicas, nodes), 1, "replicas per node %v", replicas)
	require.LessOrEqual(t, spread(leaders, nodes), 1, "leaders per node %v", leaders)

	rf := 3
	_, err = h.admin.UpdateDatabase(ctx, "grow", models.DatabasePatch{ReplicaFactor: &rf})
	require.NoError(t, err)
	h.eventually("every shard has 3 replicas", func(st *statemachine.State) bool {
		for _, sh := range st.Assignments.At("grow").Shards {
			if len(sh.Replicas) != 3 {
				return false
			}
		}
		return true
	})
	checkPlacement(t, h.shards("grow"), 10, 3, 0)
	replicas, _ = counts(h.sm.Snapshot(), nodes)
	require.LessOrEqual(t, spread(replicas, nodes), 1, "replicas per node %v", replicas)
}
