package problems

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

var now = time.UnixMilli(1_700_000_000_000)

// cluster builds a synced state: database db with the given replicas per
// shard (leader first) on cluster "c", live nodes, and every in-sync set
// equal to the live replicas.
func cluster(rf int, live []string, shards ...[]string) *statemachine.State {
	st := &statemachine.State{
		Master:          &models.MasterRecord{NodeID: "m"},
		StorageClusters: map[string]models.StorageCluster{"c": {Name: "c"}},
		Databases:       statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "c", NumShards: len(shards), ReplicaFactor: rf}}),
		Assignments:     statemachine.MapOf(map[string]models.Assignment{}),
		ShardStates:     statemachine.MapOf(map[string]models.ShardStates{}),
		Nodes:           statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"c": {}}),
		ISR:             statemachine.NestedMapOf(map[string]map[string]models.ISR{"c": {}}),
		Departed:        map[string]map[string]statemachine.DepartedNode{},
		Drains:          map[string]models.Drain{},
		Synced:          map[string]bool{statemachine.SourceMaster: true},
	}
	for _, id := range live {
		st.Nodes = statemachine.SetIn(st.Nodes, "c", id, models.StorageNode{NodeID: id})
	}
	a := models.Assignment{DB: "db", Cluster: "c"}
	ss := models.ShardStates{DB: "db"}
	for i, reps := range shards {
		a.Shards = append(a.Shards, models.ShardAssignment{ID: i, Replicas: reps})
		ss.Shards = append(ss.Shards, models.ShardState{ID: i, Leader: reps[0], Term: 2, Status: models.StatusOnline})
		st.ISR = statemachine.SetIn(st.ISR, "c", models.ShardID("db", i), models.ISR{Leader: reps[0], Term: 2, Replicas: reps})
	}
	st.Assignments, st.ShardStates = st.Assignments.Set("db", a), st.ShardStates.Set("db", ss)
	return st
}

func kinds(ps []Problem) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Severity+":"+p.Kind+":"+p.DB+p.Node)
	}
	return out
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name  string
		state func() *statemachine.State
		in    func(*Input)
		want  []string
		check func(t *testing.T, ps []Problem)
	}{
		{"healthy", func() *statemachine.State {
			return cluster(2, []string{"a", "b"}, []string{"a", "b"}, []string{"b", "a"})
		}, nil, []string{}, nil},
		{"a dead node: offline shard, under-replicated shards, node down with its shards", func() *statemachine.State {
			st := cluster(2, []string{"a", "b"}, []string{"a", "c"}, []string{"b", "c"}, []string{"c", "a"})
			// c died: shard 2 lost its only in-sync replica, the stale ISR
			// records still name c.
			st.ShardStates.At("db").Shards[2].Status = models.StatusOffline
			st.Departed["c"] = map[string]statemachine.DepartedNode{"c": {Record: models.StorageNode{NodeID: "c", NodeAddress: "h:3"}, Since: now.UnixMilli() - 5000}}
			return st
		}, nil, []string{"critical:node_down:c", "critical:shards_offline:db", "warning:under_replicated:db"},
			func(t *testing.T, ps []Problem) {
				require.Equal(t, 3, ps[0].Count, "c holds three replicas")
				require.Equal(t, now.UnixMilli()-5000, ps[0].Since)
				require.Contains(t, ps[0].Message, "down since")
				require.Equal(t, "#overview", ps[0].Link)
				require.Equal(t, 1, ps[1].Count)
				require.Equal(t, "#shards/db", ps[1].Link)
				require.Contains(t, ps[1].Message, "1 of 3 shards offline (2)")
				require.Equal(t, 2, ps[2].Count, "shards 0 and 1 are online with one live in-sync replica")
			}},
		{"a node named by assignments but never seen is down with unknown since", func() *statemachine.State {
			return cluster(1, []string{"a"}, []string{"a"}, []string{"z"})
		}, nil, []string{"critical:node_down:z", "warning:under_replicated:db"}, func(t *testing.T, ps []Problem) {
			require.Zero(t, ps[0].Since)
			require.NotContains(t, ps[0].Message, "since")
		}},
		{"a departed node without replicas is a warning, then forgotten", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Departed["c"] = map[string]statemachine.DepartedNode{"x": {Since: now.UnixMilli() - 1000}, "old": {Since: now.Add(-2 * time.Hour).UnixMilli()}}
			return st
		}, nil, []string{"warning:node_down:x"}, nil},
		{"a drained node that left is info", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Departed["c"] = map[string]statemachine.DepartedNode{"x": {Since: now.UnixMilli()}}
			st.Drains["x"] = models.Drain{NodeID: "x"}
			return st
		}, nil, []string{"info:node_down:x"}, nil},
		{"followers catching up; an ISR of an older term is not trusted", func() *statemachine.State {
			st := cluster(2, []string{"a", "b"}, []string{"a", "b"}, []string{"b", "a"})
			st.ISR = statemachine.SetIn(st.ISR, "c", "db/0", models.ISR{Leader: "a", Term: 2, Replicas: []string{"a"}})
			st.ISR = statemachine.SetIn(st.ISR, "c", "db/1", models.ISR{Leader: "b", Term: 1, Replicas: []string{"b", "a"}})
			return st
		}, nil, []string{"warning:under_replicated:db", "warning:followers_lagging:db"}, func(t *testing.T, ps []Problem) {
			require.Equal(t, 2, ps[0].Count)
			require.Equal(t, 2, ps[1].Count)
		}},
		{"leader imbalance over live, non-draining nodes", func() *statemachine.State {
			return cluster(2, []string{"a", "b", "c"}, []string{"a", "b"}, []string{"a", "c"}, []string{"a", "b"}, []string{"b", "c"})
		}, nil, []string{"warning:leader_imbalance:"}, func(t *testing.T, ps []Problem) {
			require.Contains(t, ps[0].Message, "a leads 3, c leads 0")
			require.Equal(t, "c", ps[0].Cluster)
		}},
		{"one apart is balanced", func() *statemachine.State {
			return cluster(2, []string{"a", "b", "c"}, []string{"a", "b"}, []string{"a", "c"}, []string{"b", "c"}, []string{"c", "b"})
		}, nil, []string{}, nil},
		{"no master, etcd down and alarmed", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Master = nil
			return st
		}, func(in *Input) { in.EtcdUp = false; in.EtcdAlarms = []string{"NOSPACE"} },
			[]string{"critical:etcd_down:", "critical:etcd_alarm:", "critical:master_missing:"}, nil},
		{"a storage cluster's own etcd down: critical, naming the cluster and its endpoints", func() *statemachine.State {
			return cluster(1, []string{"a"}, []string{"a"})
		}, func(in *Input) {
			in.ClustersEtcdDown = []ClusterEtcd{{Cluster: "far", Endpoints: []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"},
				Since: now.Add(-time.Minute), Err: "context deadline exceeded"}}
		}, []string{"critical:cluster_etcd_down:"}, func(t *testing.T, ps []Problem) {
			require.Equal(t, "far", ps[0].Cluster)
			require.Equal(t, now.Add(-time.Minute).UnixMilli(), ps[0].Since)
			require.Contains(t, ps[0].Message, "http://10.0.0.1:2379,http://10.0.0.2:2379")
			require.Contains(t, ps[0].Message, "failover in this cluster is impossible")
		}},
		{"before the first list no master is not a problem", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Master, st.Synced = nil, map[string]bool{}
			return st
		}, nil, []string{}, nil},
		{"disks nearly full", func() *statemachine.State {
			st := cluster(1, []string{"a", "b", "d"}, []string{"a"}, []string{"b"}, []string{"d"})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "a", models.StorageNode{NodeID: "a", DiskUsedPct: 91})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "b", models.StorageNode{NodeID: "b", DiskUsedPct: 98})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "d", models.StorageNode{NodeID: "d", DiskUsedPct: 89})
			return st
		}, nil, []string{"critical:disk_full:b", "warning:disk_full:a"}, nil},
		{"a shard's flush fails", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "a", models.StorageNode{NodeID: "a",
				FlushFailing: map[string]string{"db/0": "engine: flush up to txn 1: disk full"}})
			return st
		}, nil, []string{"critical:flush_failing:a"}, func(t *testing.T, ps []Problem) {
			require.Contains(t, ps[0].Message, "shard db/0 cannot flush (engine: flush up to txn 1: disk full)")
		}},
		{"a node deleted its oldest blocks under disk pressure", func() *statemachine.State {
			st := cluster(1, []string{"a"}, []string{"a"})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "a", models.StorageNode{NodeID: "a", DiskPressure: &models.DiskPressure{
				LimitPct: 80, UsedPct: 85, Blocks: 12, Before: 1_700_000_000e9, At: 9}})
			return st
		}, nil, []string{"warning:retention_disk_pressure:a"}, func(t *testing.T, ps []Problem) {
			require.Contains(t, ps[0].Message, "data disk 85% full, past --retention-max-disk-pct 80: deleted 12 of its oldest blocks (those whose points all precede 2023-11-14T22:13:20Z)")
			require.EqualValues(t, 9, ps[0].Since)
		}},
		{"nodes fenced off writes by a full and a failing disk", func() *statemachine.State {
			st := cluster(1, []string{"a", "b"}, []string{"a"}, []string{"b"})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "a", models.StorageNode{NodeID: "a", DiskFault: &models.DiskFault{
				Kind: models.DiskFull, Path: "/data/shards/log.d/0000000000000001.wal", Error: "write: no space left on device", Since: 7}})
			st.Nodes = statemachine.SetIn(st.Nodes, "c", "b", models.StorageNode{NodeID: "b", DiskFault: &models.DiskFault{
				Kind: models.DiskError, Path: "/data/x.wal", Error: "input/output error"}})
			return st
		}, nil, []string{"critical:disk_full:a", "critical:disk_error:b"}, func(t *testing.T, ps []Problem) {
			require.Contains(t, ps[0].Message, "storage node a refuses writes: its disk is full (write-ahead log at /data/shards/log.d/0000000000000001.wal: write: no space left on device)")
			require.EqualValues(t, 7, ps[0].Since)
			require.Equal(t, "c", ps[0].Cluster)
			require.Contains(t, ps[1].Message, "its disk failed a write")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{State: tt.state(), Now: now, EtcdUp: true}
			if tt.in != nil {
				tt.in(&in)
			}
			ps := Compute(in)
			require.Equal(t, tt.want, kinds(ps))
			if tt.check != nil {
				tt.check(t, ps)
			}
		})
	}
}

func TestDownNodesListsLastKnownShards(t *testing.T) {
	var shards [][]string
	for range MaxListed + 3 {
		shards = append(shards, []string{"a", "gone"})
	}
	st := cluster(2, []string{"a"}, shards...)
	st.Drains["gone"] = models.Drain{NodeID: "gone"}
	down := DownNodes(st, now, time.Hour)
	require.Len(t, down, 1)
	require.Equal(t, "gone", down[0].NodeID)
	require.Equal(t, MaxListed+3, down[0].Replicas)
	require.Len(t, down[0].Shards, MaxListed, "the list is bounded, the count is not")
	require.Equal(t, "db/0", down[0].Shards[0])
	require.True(t, down[0].Draining)
}
