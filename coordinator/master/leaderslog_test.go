package master

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A publication that changes shards of a database logs one line for it,
// naming each changed shard's leader, term, status and reason (it was a
// line per shard: ~10,700 for a whole domain at 1,000 nodes); unchanged
// shards are not in it.
func TestLeadersChangedLogsOneLinePerDatabase(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	m := &Master{lg: zap.New(core)}
	st := statemachine.New(statemachine.Config{}).Snapshot()
	next := models.ShardStates{DB: "a", Shards: []models.ShardState{
		{ID: 0, Leader: "n1", Term: 1, Status: models.StatusOnline},
		{ID: 1, Leader: "n2", Term: 3, Status: models.StatusOnline, Reason: "leader n2 from live in-sync replicas [n2 n3]"},
		{ID: 2, Term: 2, Status: models.StatusOffline, Reason: "no live in-sync replica"},
	}}
	m.leadersChanged(st, "a", next, []int{1, 2})
	m.leadersChanged(st, "b", models.ShardStates{DB: "b"}, nil)
	entries := logs.All()
	require.Len(t, entries, 1, "one line for a, none for b (nothing changed)")
	f := entries[0].ContextMap()
	require.Equal(t, "a", f["db"])
	require.EqualValues(t, 2, f["count"])
	require.Equal(t, []any{
		map[string]any{"shard": 1, "leader": "n2", "term": int64(3), "status": models.StatusOnline, "reason": "leader n2 from live in-sync replicas [n2 n3]"},
		map[string]any{"shard": 2, "leader": "", "term": int64(2), "status": models.StatusOffline, "reason": "no live in-sync replica"},
	}, f["shards"])
}
