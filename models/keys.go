package models

import (
	"strconv"
	"strings"
)

// Keys lays out Cairn's etcd keys under one namespace. See DESIGN.md.
type Keys struct{ NS string }

func (k Keys) join(parts ...string) string { return k.NS + "/" + strings.Join(parts, "/") }

// Master is the election key.
func (k Keys) Master() string { return k.join("master", "node") }

// BrokersPrefix holds the leased broker records.
func (k Keys) BrokersPrefix() string { return k.join("live", "brokers") + "/" }

// Broker is one broker's record.
func (k Keys) Broker(id string) string { return k.BrokersPrefix() + id }

// StorageConfigPrefix holds the storage cluster configs.
func (k Keys) StorageConfigPrefix() string { return k.join("storage", "config") + "/" }

// StorageConfig is one storage cluster's config.
func (k Keys) StorageConfig(name string) string { return k.StorageConfigPrefix() + name }

// DatabaseConfigPrefix holds database DDL.
func (k Keys) DatabaseConfigPrefix() string { return k.join("database", "config") + "/" }

// DatabaseConfig is one database's DDL.
func (k Keys) DatabaseConfig(db string) string { return k.DatabaseConfigPrefix() + db }

// AssignPrefix holds shard assignments (master only).
func (k Keys) AssignPrefix() string { return k.join("database", "assign") + "/" }

// Assign is one database's assignment.
func (k Keys) Assign(db string) string { return k.AssignPrefix() + db }

// ShardStatePrefix holds shard leaders and terms (master only).
func (k Keys) ShardStatePrefix() string { return k.join("state", "shards") + "/" }

// ShardState is one database's shard states.
func (k Keys) ShardState(db string) string { return k.ShardStatePrefix() + db }

// FailoverLock is the failover lock of one database, taken in the txn that
// publishes its shard states (one key for all its shards).
//
// The previous release took one lock per shard (NS/failover/<db>/<shard>).
// In a rolling upgrade the two never meet on one publication: only the
// master holding the current term publishes (every publication is fenced on
// the term, and guarded by the mod revision of the database's states key,
// which serializes every write of a database's states whatever locks were
// taken), and a previous master's leftover per-shard locks are bound to its
// lease and go with it. Names hold no "/" (models.ValidName), so a database
// lock is never a shard lock's key. Both live under NS/failover/, which
// backup and restore skip.
func (k Keys) FailoverLock(db string) string { return k.join("failover", db) }

// OperatorPrefix holds the master's operators in flight (master only).
func (k Keys) OperatorPrefix() string { return k.join("operators") + "/" }

// Operator is the operator in flight on one shard.
func (k Keys) Operator(db string, shard int) string {
	return k.OperatorPrefix() + db + "/" + strconv.Itoa(shard)
}

// DrainPrefix holds drain marks of storage nodes.
func (k Keys) DrainPrefix() string { return k.join("drain") + "/" }

// Drain is one node's drain mark.
func (k Keys) Drain(node string) string { return k.DrainPrefix() + node }

// ClusterNamespace is SNS: the namespace of a storage cluster's own keys.
func (k Keys) ClusterNamespace(c StorageCluster) string {
	if c.Namespace != "" {
		return strings.TrimSuffix(c.Namespace, "/")
	}
	return k.join("storage", c.Name)
}

// ClusterKeys lays out the keys of one storage cluster under SNS.
type ClusterKeys struct{ SNS string }

// NodesPrefix holds the leased storage node records.
func (c ClusterKeys) NodesPrefix() string { return c.SNS + "/live/nodes/" }

// Node is one storage node's record.
func (c ClusterKeys) Node(id string) string { return c.NodesPrefix() + id }

// ISRPrefix holds in-sync replica sets.
func (c ClusterKeys) ISRPrefix() string { return c.SNS + "/isr/" }

// ISR is one shard's in-sync replica set.
func (c ClusterKeys) ISR(db string, shard int) string {
	return c.ISRPrefix() + db + "/" + strconv.Itoa(shard)
}
