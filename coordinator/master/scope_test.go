package master

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestPassScopeLooksAtWhatChanged: after a first pass over every database,
// a pass looks at each database whose config, assignment, states or a key's
// mod revision changed, the ones still to place, not led, forgotten by the
// led set or named by an unreadable key, and, of 200 unchanged databases,
// at no more than the few that share a trie slot with a changed one; a
// Resync later, or when the led set forgot everything, at all of them.
func TestPassScopeLooksAtWhatChanged(t *testing.T) {
	const c, n = "c", 200
	dbs, assign, states := map[string]models.Database{}, map[string]models.Assignment{}, map[string]models.ShardStates{}
	revs := map[string]int64{}
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		dbs[name] = models.Database{Name: name, StorageCluster: c, NumShards: 1, ReplicaFactor: 1}
		assign[name] = models.Assignment{DB: name, Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1"}}}}
		states[name] = models.ShardStates{DB: name, Shards: []models.ShardState{{ID: 0, Leader: "n1", Term: 1}}}
		revs[name] = int64(i + 1)
	}
	base := &statemachine.State{
		Databases: statemachine.MapOf(dbs), Assignments: statemachine.MapOf(assign), ShardStates: statemachine.MapOf(states),
		ModRevs: map[string]statemachine.Map[int64]{statemachine.SourceDatabaseConfig: statemachine.MapOf(revs),
			statemachine.SourceAssign: statemachine.MapOf(revs), statemachine.SourceShardState: statemachine.MapOf(revs)},
		Invalid: map[string]map[string]string{},
	}
	edit := func(f func(st *statemachine.State)) *statemachine.State {
		st := *base
		st.ModRevs, st.Invalid = maps.Clone(base.ModRevs), maps.Clone(base.Invalid)
		f(&st)
		return &st
	}
	now := time.Unix(1000, 0)
	const resync = time.Minute
	for _, tc := range []struct {
		name   string
		st     *statemachine.State
		forgot map[string]bool
		all    bool
		later  time.Duration
		want   []string // looked at, at least
		most   int      // looked at, at most
	}{
		{"nothing changed", base, nil, false, 0, nil, 0},
		{"a config", edit(func(st *statemachine.State) {
			st.Databases = st.Databases.Set("d010", models.Database{Name: "d010", StorageCluster: c, NumShards: 1, ReplicaFactor: 2})
		}), nil, false, 0, []string{"d010"}, 8},
		{"an assignment", edit(func(st *statemachine.State) {
			st.Assignments = st.Assignments.Set("d020", models.Assignment{DB: "d020", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n2"}}}})
		}), nil, false, 0, []string{"d020"}, 8},
		{"shard states", edit(func(st *statemachine.State) {
			st.ShardStates = st.ShardStates.Set("d030", models.ShardStates{DB: "d030", Shards: []models.ShardState{{ID: 0, Leader: "n9", Term: 2}}})
		}), nil, false, 0, []string{"d030"}, 8},
		{"a dropped database", edit(func(st *statemachine.State) {
			st.Databases = st.Databases.Delete("d040")
		}), nil, false, 0, []string{"d040"}, 8},
		{"a key rewritten with the same value", edit(func(st *statemachine.State) {
			st.ModRevs[statemachine.SourceAssign] = st.ModRevs[statemachine.SourceAssign].Set("d050", 999)
		}), nil, false, 0, []string{"d050"}, 8},
		{"an unreadable key", edit(func(st *statemachine.State) {
			st.Invalid[statemachine.SourceShardState] = map[string]string{"d060": "bad"}
		}), nil, false, 0, []string{"d060"}, 8},
		{"a new database to place", edit(func(st *statemachine.State) {
			st.Databases = st.Databases.Set("new", models.Database{Name: "new", StorageCluster: c, NumShards: 1, ReplicaFactor: 1})
		}), nil, false, 0, []string{"new"}, 8},
		{"forgotten by the led set", base, map[string]bool{"d070": true, "d071": true}, false, 0, []string{"d070", "d071"}, 2},
		{"everything forgotten", base, nil, true, 0, slices.Collect(maps.Keys(dbs)), n},
		{"a resync later", base, nil, false, resync, slices.Collect(maps.Keys(dbs)), n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p passScope
			all := p.names(base, now, resync, nil, false)
			require.Len(t, all, n, "the first pass looks at every database")
			got := p.names(tc.st, now.Add(tc.later), resync, tc.forgot, tc.all)
			for _, name := range tc.want {
				require.True(t, got[name], "%s changed and was not looked at", name)
			}
			require.LessOrEqual(t, len(got), tc.most, "looked at %v", slices.Sorted(maps.Keys(got)))
		})
	}
}

// TestPassScopeKeepsWaitingDatabases: a database still to place, and one
// whose failover check found a shard to lead, are looked at on every pass
// until placed, led or gone, though nothing of theirs changes.
func TestPassScopeKeepsWaitingDatabases(t *testing.T) {
	const c = "c"
	st := &statemachine.State{
		Databases: statemachine.MapOf(map[string]models.Database{
			"unplaced": {Name: "unplaced", StorageCluster: c, NumShards: 2, ReplicaFactor: 1},
			"unled":    {Name: "unled", StorageCluster: c, NumShards: 1, ReplicaFactor: 1},
			"led":      {Name: "led", StorageCluster: c, NumShards: 1, ReplicaFactor: 1}}),
		Assignments: statemachine.MapOf(map[string]models.Assignment{
			"unplaced": {DB: "unplaced", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1"}}}},
			"unled":    {DB: "unled", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1"}}}},
			"led":      {DB: "led", Cluster: c, Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1"}}}}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{}),
		ModRevs:     map[string]statemachine.Map[int64]{},
	}
	now := time.Unix(1000, 0)
	var p passScope
	first := p.names(st, now, time.Hour, nil, false)
	p.checked(slices.Collect(maps.Keys(first)), map[string]bool{"led": true, "unplaced": true})
	for range 3 {
		require.Equal(t, map[string]bool{"unplaced": true, "unled": true}, p.names(st, now, time.Hour, nil, false))
	}
	led := *st
	led.Assignments = st.Assignments.Set("unplaced", models.Assignment{DB: "unplaced", Cluster: c,
		Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"n1"}}, {ID: 1, Replicas: []string{"n1"}}}})
	got := p.names(&led, now, time.Hour, nil, false)
	require.True(t, got["unplaced"], "placed: looked at once more")
	p.checked([]string{"unplaced", "unled"}, map[string]bool{"unplaced": true, "unled": true})
	require.Empty(t, p.names(&led, now, time.Hour, nil, false))

	p.checked([]string{"unled"}, map[string]bool{})
	gone := led
	gone.Databases = led.Databases.Delete("unled")
	gone.Assignments = led.Assignments.Delete("unled")
	require.True(t, p.names(&gone, now, time.Hour, nil, false)["unled"], "dropped: looked at once more")
	require.Empty(t, p.names(&gone, now, time.Hour, nil, false), "gone: no longer looked at")
}

// TestMemberSigsFollowTheLiveSet: the kept signature is MembershipSig's
// through records rewritten (kept) and nodes coming and going (made again).
func TestMemberSigsFollowTheLiveSet(t *testing.T) {
	const c = "c"
	st := &statemachine.State{Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{c: {}})}
	s := memberSigs{}
	for i := range 300 {
		id := fmt.Sprintf("n%02d", (i*7)%40)
		next := *st
		switch {
		case i%5 == 0 && st.Nodes.At(c).Has(id):
			next.Nodes = statemachine.DeleteIn(st.Nodes, c, id)
		default:
			next.Nodes = statemachine.SetIn(st.Nodes, c, id, models.StorageNode{NodeID: id, LastUpdated: int64(i)})
		}
		st = &next
		require.Equal(t, MembershipSig(st, c), s.of(st, c), "step %d", i)
	}
}

// TestReplicaCountsFollowTheState: the kept answer is a full read's through
// assignments and configs changing, appearing and going.
func TestReplicaCountsFollowTheState(t *testing.T) {
	st := &statemachine.State{Assignments: statemachine.MapOf(map[string]models.Assignment{}),
		Databases: statemachine.MapOf(map[string]models.Database{})}
	full := func(st *statemachine.State) bool {
		var fresh replicaCounts
		return fresh.anyOff(st)
	}
	var kept replicaCounts
	for i := range 400 {
		name := fmt.Sprintf("d%02d", (i*7)%30)
		next := *st
		switch i % 4 {
		case 0:
			next.Databases = st.Databases.Set(name, models.Database{Name: name, ReplicaFactor: 2 + i%2})
		case 1:
			next.Assignments = st.Assignments.Set(name, models.Assignment{DB: name,
				Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b", "c"}[:2+(i/4)%2]}}})
		case 2:
			next.Databases = st.Databases.Delete(name)
		case 3:
			if i%3 == 0 {
				next.Assignments = st.Assignments.Delete(name)
			}
		}
		st = &next
		require.Equal(t, full(st), kept.anyOff(st), "step %d", i)
	}
}
