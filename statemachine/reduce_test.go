package statemachine

import (
	"strconv"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

func fold(s *State, evs ...Event) *State {
	b := newBuilder(s)
	for _, ev := range evs {
		b.apply(ev)
	}
	return b.s
}

func TestReducers(t *testing.T) {
	put := func(kind Kind, cluster, name string, v any, rev int64) Event {
		return Event{Source: kind.String() + cluster, Kind: kind, Cluster: cluster, Type: kv.WatchPut, Name: name, Value: v, Rev: rev}
	}
	del := func(kind Kind, cluster, name string, rev int64) Event {
		return Event{Source: kind.String() + cluster, Kind: kind, Cluster: cluster, Type: kv.WatchDelete, Name: name, Rev: rev}
	}
	tests := []struct {
		name  string
		evs   []Event
		check func(t *testing.T, s *State)
	}{
		{"master put then delete", []Event{put(KindMaster, "", "", models.MasterRecord{NodeID: "a", Term: 7}, 7), del(KindMaster, "", "", 9)},
			func(t *testing.T, s *State) {
				require.Nil(t, s.Master)
				require.EqualValues(t, 9, s.Revisions["master"])
			}},
		{"master put", []Event{put(KindMaster, "", "", models.MasterRecord{NodeID: "a", Term: 7}, 7)},
			func(t *testing.T, s *State) {
				require.Equal(t, "a", s.Master.NodeID)
				require.EqualValues(t, 7, s.Master.Term)
			}},
		{"databases upsert and delete", []Event{
			put(KindDatabaseConfig, "", "db1", models.Database{Name: "db1", NumShards: 2}, 3),
			put(KindDatabaseConfig, "", "db2", models.Database{Name: "db2"}, 4),
			put(KindDatabaseConfig, "", "db1", models.Database{Name: "db1", NumShards: 4}, 5),
			del(KindDatabaseConfig, "", "db2", 6)},
			func(t *testing.T, s *State) {
				require.Len(t, s.Databases.ToMap(), 1)
				require.Equal(t, 4, s.Databases.At("db1").NumShards)
			}},
		{"nodes are per cluster", []Event{
			put(KindStorageNodes, "c1", "n1", models.StorageNode{NodeID: "n1"}, 1),
			put(KindStorageNodes, "c2", "n2", models.StorageNode{NodeID: "n2"}, 1),
			del(KindStorageNodes, "c1", "n1", 2)},
			func(t *testing.T, s *State) {
				require.Empty(t, s.Nodes.At("c1").ToMap())
				require.Contains(t, s.Nodes.At("c2").ToMap(), "n2")
				_, ok := s.NodeRecord("n2")
				require.True(t, ok)
			}},
		{"removed source drops its cluster", []Event{
			put(KindISR, "c1", "db/0", models.ISR{Leader: "n1"}, 1),
			{Source: "isrc1", Kind: KindISR, Cluster: "c1", Removed: true}},
			func(t *testing.T, s *State) { require.NotContains(t, s.ISR.ToMap(), "c1") }},
		{"synced marks the source", []Event{{Source: "brokers", Type: kv.WatchSynced, Rev: 42}},
			func(t *testing.T, s *State) {
				require.True(t, s.Synced["brokers"])
				require.EqualValues(t, 42, s.Revisions["brokers"])
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := emptyState()
			s := fold(base, tc.evs...)
			tc.check(t, s)
			require.Empty(t, base.Databases.ToMap(), "the previous snapshot is never modified")
			require.Empty(t, base.Nodes.ToMap())
			require.Nil(t, base.Master)
		})
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	s1 := fold(emptyState(), Event{Kind: KindBrokers, Type: kv.WatchPut, Name: "b1", Value: models.BrokerRecord{NodeID: "b1"}})
	s2 := fold(s1, Event{Kind: KindBrokers, Type: kv.WatchPut, Name: "b2", Value: models.BrokerRecord{NodeID: "b2"}})
	require.Len(t, s1.Brokers, 1)
	require.Len(t, s2.Brokers, 2)
}

func TestDepartedNodes(t *testing.T) {
	put := func(name string, at int64) Event {
		return Event{Source: "nodes/c1", Kind: KindStorageNodes, Cluster: "c1", Type: kv.WatchPut, Name: name,
			Value: models.StorageNode{NodeID: name, LastTxnID: map[string]uint64{"db/0": 5}}, At: at}
	}
	del := func(name string, at int64) Event {
		return Event{Source: "nodes/c1", Kind: KindStorageNodes, Cluster: "c1", Type: kv.WatchDelete, Name: name, At: at}
	}
	s := fold(emptyState(), put("n1", 1), put("n2", 1), del("n1", 100))
	require.NotContains(t, s.Nodes.At("c1").ToMap(), "n1")
	require.Equal(t, DepartedNode{Record: models.StorageNode{NodeID: "n1", LastTxnID: map[string]uint64{"db/0": 5}}, Since: 100},
		s.Departed["c1"]["n1"], "a vanished node is remembered with its last record and when it went")

	// A second delete of a node already gone keeps the first time.
	s2 := fold(s, del("n1", 200))
	require.EqualValues(t, 100, s2.Departed["c1"]["n1"].Since)

	// It registers again: no longer departed.
	s3 := fold(s2, put("n1", 300))
	require.NotContains(t, s3.Departed["c1"], "n1")
	require.Contains(t, s3.Nodes.At("c1").ToMap(), "n1")
	require.Contains(t, s2.Departed["c1"], "n1", "published snapshots are never modified")

	// The cluster's source goes: its departed nodes go with it.
	s4 := fold(s2, Event{Source: "nodes/c1", Kind: KindStorageNodes, Cluster: "c1", Removed: true})
	require.Empty(t, s4.Departed["c1"])
}

func TestDepartedNodesBounded(t *testing.T) {
	var evs []Event
	for i := range MaxDeparted + 5 {
		id := "n" + strconv.Itoa(i)
		evs = append(evs,
			Event{Source: "nodes/c", Kind: KindStorageNodes, Cluster: "c", Type: kv.WatchPut, Name: id, Value: models.StorageNode{NodeID: id}},
			Event{Source: "nodes/c", Kind: KindStorageNodes, Cluster: "c", Type: kv.WatchDelete, Name: id, At: int64(i)})
	}
	s := fold(emptyState(), evs...)
	require.Len(t, s.Departed["c"], MaxDeparted)
	require.NotContains(t, s.Departed["c"], "n0", "the oldest is forgotten first")
	require.Contains(t, s.Departed["c"], "n"+strconv.Itoa(MaxDeparted+4))
}
