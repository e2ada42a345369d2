package statemachine

import (
	"github.com/cairn-db/cairn/coordinator/kv"
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

// MainSources are the prefixes every node watches in Cairn's own etcd: one
// per main kind of the registry.
func MainSources(store kv.Store, k models.Keys) []Source {
	var out []Source
	for kind, spec := range kinds {
		if spec.prefix != nil {
			out = append(out, Source{Name: spec.source, Store: store, Prefix: spec.prefix(k), Kind: Kind(kind)})
		}
	}
	return out
}

// ClusterSources are the prefixes watched per storage cluster, in the
// cluster's own store: one per cluster-scoped kind of the registry.
func ClusterSources(store kv.Store, cluster string, ck models.ClusterKeys) []Source {
	var out []Source
	for kind, spec := range kinds {
		if spec.clusterPrefix != nil {
			out = append(out, Source{Name: spec.clusterSource + cluster, Store: store, Prefix: spec.clusterPrefix(ck), Kind: Kind(kind), Cluster: cluster})
		}
	}
	return out
}

// ClusterNodesSource names a cluster's live-nodes source.
func ClusterNodesSource(cluster string) string { return clusterNodesPrefix + cluster }

// ClusterISRSource names a cluster's in-sync-set source.
func ClusterISRSource(cluster string) string { return clusterISRPrefix + cluster }
