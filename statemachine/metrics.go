package statemachine

import (
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/prometheus/client_golang/prometheus"
)

// clusterCollector derives the cluster's health from the state snapshot at
// scrape time: nothing has to keep these gauges up to date, and they are as
// fresh as the node's view of etcd. Every node with the full state can serve
// them, so alerts aggregate with max by (database).
type clusterCollector struct {
	snapshot       func() *State
	shards         *prometheus.Desc
	offline        *prometheus.Desc
	underRepl      *prometheus.Desc
	storageNodes   *prometheus.Desc
	brokers        *prometheus.Desc
	masterElected  *prometheus.Desc
	stateFromLocal *prometheus.Desc
}

// NewClusterCollector returns the collector of cluster-wide gauges computed
// from snapshot.
func NewClusterCollector(snapshot func() *State) prometheus.Collector {
	return &clusterCollector{
		snapshot: snapshot,
		shards: prometheus.NewDesc("cairn_cluster_shards",
			"Shards of each database, as this node's state sees them.", []string{"database"}, nil),
		offline: prometheus.NewDesc("cairn_cluster_shards_offline",
			"Shards of each database without a live leader (offline or not placed yet): their writes fail.", []string{"database"}, nil),
		underRepl: prometheus.NewDesc("cairn_cluster_shards_under_replicated",
			"Online shards of each database with fewer live in-sync replicas than the replica factor.", []string{"database"}, nil),
		storageNodes: prometheus.NewDesc("cairn_cluster_storage_nodes",
			"Live storage nodes of each storage cluster.", []string{"cluster"}, nil),
		brokers: prometheus.NewDesc("cairn_cluster_brokers",
			"Live brokers.", nil, nil),
		masterElected: prometheus.NewDesc("cairn_cluster_master_elected",
			"1 while the state names an elected master, else 0.", nil, nil),
		stateFromLocal: prometheus.NewDesc("cairn_cluster_state_from_backup",
			"1 while this node serves state from its local backup because etcd has not confirmed it yet.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.shards, c.offline, c.underRepl, c.storageNodes, c.brokers, c.masterElected, c.stateFromLocal} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.snapshot()
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for name, db := range st.Databases.All() {
		h := ShardHealth(st, db)
		gauge(c.shards, db.NumShards, name)
		gauge(c.offline, h.Offline, name)
		gauge(c.underRepl, h.UnderReplicated, name)
	}
	for name := range st.StorageClusters {
		gauge(c.storageNodes, st.Nodes.At(name).Len(), name)
	}
	gauge(c.brokers, len(st.Brokers))
	gauge(c.masterElected, boolInt(st.Master != nil))
	gauge(c.stateFromLocal, boolInt(st.FromBackup))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Health counts a database's unhealthy shards.
type Health struct {
	Offline         int // no live leader, or not placed yet
	UnderReplicated int // online, fewer live in-sync replicas than the replica factor
}

// ShardHealth counts db's offline and under-replicated shards in st. A shard
// whose leader never published an in-sync set counts all its replicas as in
// sync (they are all empty), as the master does; only live ones count.
func ShardHealth(st *State, db models.Database) Health {
	var h Health
	a := st.Assignments.At(db.Name)
	live := st.Nodes.At(db.StorageCluster)
	h.Offline = max(db.NumShards-len(a.Shards), 0)
	for _, sh := range a.Shards {
		s, ok := st.ShardState(db.Name, sh.ID)
		if _, leaderLive := live.Get(s.Leader); !ok || s.Status != models.StatusOnline || !leaderLive {
			h.Offline++
			continue
		}
		isr := sh.Replicas
		if set, ok := st.ISR.At(db.StorageCluster).Get(models.ShardID(db.Name, sh.ID)); ok {
			isr = set.Replicas
		}
		n := 0
		for _, r := range isr {
			if _, ok := live.Get(r); ok && slices.Contains(sh.Replicas, r) {
				n++
			}
		}
		if n < db.ReplicaFactor {
			h.UnderReplicated++
		}
	}
	return h
}
