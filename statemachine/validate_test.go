package statemachine

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

func TestDecodeTolerantAndValidated(t *testing.T) {
	tests := []struct {
		name  string
		kind  Kind
		value string
		want  any    // nil: refused
		err   string // substring of the refusal
	}{
		{"assignment pretty-printed with unknown fields", KindAssign,
			"{\n  \"db\": \"d\",\n  \"cluster\": \"default\",\n  \"future\": {\"x\": 1},\n  \"shards\": [ {\"id\": 0, \"replicas\": [\"a\", \"b\"]} ]\n}",
			models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"a", "b"}}}}, ""},
		{"assignment without db takes the key's", KindAssign, `{"cluster":"c","shards":[]}`,
			models.Assignment{DB: "d", Cluster: "c", Shards: []models.ShardAssignment{}}, ""},
		{"assignment under another key", KindAssign, `{"db":"other","shards":[]}`, nil, "stored under"},
		{"assignment shard out of position", KindAssign, `{"shards":[{"id":1,"replicas":["a"]}]}`, nil, "position"},
		{"assignment repeated replica", KindAssign, `{"shards":[{"id":0,"replicas":["a","a"]}]}`, nil, "repeated replica"},
		{"assignment empty replicas", KindAssign, `{"shards":[{"id":0,"replicas":[]}]}`, nil, "no replicas"},
		{"states without status are offline", KindShardState, `{"shards":[{"id":0,"leader":"a","term":3}]}`,
			models.ShardStates{DB: "d", Shards: []models.ShardState{{ID: 0, Leader: "a", Term: 3, Status: models.StatusOffline, Reason: "no status stored"}}}, ""},
		{"states with unknown status", KindShardState, `{"shards":[{"id":0,"leader":"a","term":3,"status":"weird"}]}`, nil, "status"},
		{"states online without leader", KindShardState, `{"shards":[{"id":0,"term":3,"status":"online"}]}`, nil, "leader"},
		{"states negative term", KindShardState, `{"shards":[{"id":0,"leader":"a","term":-1,"status":"online"}]}`, nil, "term"},
		{"states repeated id", KindShardState, `{"shards":[{"id":0,"status":"offline"},{"id":0,"status":"offline"}]}`, nil, "repeated"},
		{"not json", KindShardState, `{"shards":`, nil, ""},
		{"node record with max_term and unknown fields", KindStorageNodes, `{"node_id":"a","max_term":{"d/0":4},"new":true}`,
			models.StorageNode{NodeID: "a", MaxTerm: map[string]int64{"d/0": 4}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(tc.kind, "d", []byte(tc.value), 0)
			if tc.want == nil {
				require.Error(t, err)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestModRevsFollowPutsAndDeletes(t *testing.T) {
	ev := func(typ kv.WatchEventKind, name string, rev int64) Event {
		e := Event{Source: SourceAssign, Kind: KindAssign, Type: typ, Name: name, Rev: rev}
		if typ == kv.WatchPut {
			e.Value = models.Assignment{DB: name}
		}
		return e
	}
	s := fold(emptyState(), ev(kv.WatchPut, "a", 5), ev(kv.WatchPut, "b", 6), ev(kv.WatchPut, "a", 9))
	require.EqualValues(t, 9, s.ModRev(SourceAssign, "a"))
	require.EqualValues(t, 6, s.ModRev(SourceAssign, "b"))
	s2 := fold(s, ev(kv.WatchDelete, "a", 10))
	require.EqualValues(t, 0, s2.ModRev(SourceAssign, "a"))
	require.EqualValues(t, 9, s.ModRev(SourceAssign, "a"), "a published state never changes")
	s3 := fold(s2, Event{Source: SourceAssign, Kind: KindAssign, Removed: true})
	require.EqualValues(t, 0, s3.ModRev(SourceAssign, "b"))
}

// An invalid put advances its source's revision (waiters on it never hang)
// but keeps the key's last good value and mod revision.
func TestInvalidPutKeepsLastGoodValue(t *testing.T) {
	good := Event{Source: SourceShardState, Kind: KindShardState, Type: kv.WatchPut, Name: "d", Rev: 4,
		Value: models.ShardStates{DB: "d"}}
	bad := Event{Source: SourceShardState, Kind: KindShardState, Type: kv.WatchPut, Name: "d", Rev: 7, Invalid: "json: cannot unmarshal"}
	s := fold(emptyState(), good, bad)
	require.EqualValues(t, 7, s.Revisions[SourceShardState])
	require.EqualValues(t, 4, s.ModRev(SourceShardState, "d"))
	require.Equal(t, models.ShardStates{DB: "d"}, s.ShardStates.At("d"))
	require.Equal(t, "json: cannot unmarshal", s.Invalid[SourceShardState]["d"])
	// A good value again clears it.
	good.Rev = 9
	s2 := fold(s, good)
	require.Empty(t, s2.Invalid[SourceShardState]["d"])
	require.EqualValues(t, 9, s2.ModRev(SourceShardState, "d"))
	require.Equal(t, "json: cannot unmarshal", s.Invalid[SourceShardState]["d"], "published states never change")
}
