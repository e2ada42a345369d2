package statemachine

import (
	"github.com/cairn-db/cairn/kv"
	"github.com/cairn-db/cairn/models"
)

// Names of the sources in Cairn's own etcd. They key the local backup, so they
// never change.
const (
	SourceMaster         = "master"
	SourceBrokers        = "brokers"
	SourceStorageConfig  = "storage_config"
	SourceDatabaseConfig = "databases"
	SourceAssign         = "assign"
	SourceShardState     = "shard_state"
	SourceDrain          = "drain"
	clusterNodesPrefix   = "nodes/"
	clusterISRPrefix     = "isr/"
)

// MainSources are the prefixes every node watches in Cairn's own etcd.
func MainSources(store kv.Store, k models.Keys) []Source {
	return []Source{
		{Name: SourceMaster, Store: store, Prefix: k.Master(), Kind: KindMaster},
		{Name: SourceBrokers, Store: store, Prefix: k.BrokersPrefix(), Kind: KindBrokers},
		{Name: SourceStorageConfig, Store: store, Prefix: k.StorageConfigPrefix(), Kind: KindStorageConfig},
		{Name: SourceDatabaseConfig, Store: store, Prefix: k.DatabaseConfigPrefix(), Kind: KindDatabaseConfig},
		{Name: SourceAssign, Store: store, Prefix: k.AssignPrefix(), Kind: KindAssign},
		{Name: SourceShardState, Store: store, Prefix: k.ShardStatePrefix(), Kind: KindShardState},
		{Name: SourceDrain, Store: store, Prefix: k.DrainPrefix(), Kind: KindDrain},
	}
}

// ClusterSources are the prefixes watched per storage cluster, in the
// cluster's own store.
func ClusterSources(store kv.Store, cluster string, ck models.ClusterKeys) []Source {
	return []Source{
		{Name: ClusterNodesSource(cluster), Store: store, Prefix: ck.NodesPrefix(), Kind: KindStorageNodes, Cluster: cluster},
		{Name: ClusterISRSource(cluster), Store: store, Prefix: ck.ISRPrefix(), Kind: KindISR, Cluster: cluster},
	}
}

// ClusterNodesSource names a cluster's live-nodes source.
func ClusterNodesSource(cluster string) string { return clusterNodesPrefix + cluster }

// ClusterISRSource names a cluster's in-sync-set source.
func ClusterISRSource(cluster string) string { return clusterISRPrefix + cluster }
