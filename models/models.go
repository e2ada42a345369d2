// Package models holds the records Cairn keeps in etcd and in every node's local
// state store. They are plain data: JSON on the wire and on disk, no behaviour
// beyond validation.
package models

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// NameRE is the rule for database, storage cluster and node names.
var NameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s may name a database, cluster or node.
func ValidName(s string) bool { return NameRE.MatchString(s) }

// ProtocolVersion is the version of the node-to-node protocol this binary
// speaks; every node advertises it in its record. Version 1 is the records
// without the field (release 0.1.0). A node talks to peers of its own
// version and of the one before (COMPATIBILITY.md): it never assumes a newer
// endpoint exists, and treats any refusal of an unknown endpoint as "not
// spoken here" and takes the older way.
const ProtocolVersion = 5

// ProtocolDeletes is the first protocol whose nodes read delete entries
// (storage/wire entry version 3): a delete waits until every replica of
// the database speaks it, or an older follower could not apply its leader's
// log.
const ProtocolDeletes = 3

// ProtocolPacks is the first protocol whose nodes read shard files of
// format 3 (packed blocks, storage/engine/packs.go): a replica writes packs
// only while every replica of its shard speaks it, or a full sync from it
// would be refused by an older follower.
const ProtocolPacks = 4

// ProtocolPartitions is the first protocol whose nodes read shard files of
// format 4 (sealed time partitions, storage/engine/partition.go) and take
// their partition files in a full-sync snapshot: a replica seals only while
// every replica of its shard speaks it, and a follower of an older
// protocol is sent no snapshot of a sealed shard.
const ProtocolPartitions = 5

// MasterRecord is the value of the election key. Term is the key's create
// revision, filled in when the record is read back.
type MasterRecord struct {
	NodeID    string `json:"node_id"`
	Address   string `json:"address"`
	Term      int64  `json:"term"`
	ElectedAt int64  `json:"elected_at"` // unix milliseconds
	Protocol  int    `json:"protocol,omitempty"`
}

// BrokerRecord is a live broker.
type BrokerRecord struct {
	NodeID    string `json:"node_id"`
	Address   string `json:"address"`
	StartedAt int64  `json:"started_at"` // unix milliseconds
	// Protocol is the node-to-node protocol the node speaks (0: version 1,
	// a node of release 0.1.0).
	Protocol int `json:"protocol,omitempty"`
}

// StorageNode is a storage node's leased record, with SableDB's fields.
// Shard keys in the maps are ShardID strings ("db/shard"). Liveness is the
// record's lease: the record is rewritten only when its content changes, so
// LastUpdated is the time of the last real change, not a heartbeat.
// LastTxnID is not kept in etcd (it would change with every write): the
// master asks the replicas for it at failover (storage.ReplicaTxn).
type StorageNode struct {
	NodeID      string `json:"node_id"`
	NodeAddress string `json:"node_address"`
	Role        string `json:"role"`
	Cluster     string `json:"cluster"`
	LastUpdated int64  `json:"last_updated"` // unix microseconds of the last change of the record
	// LastTxnID is no longer written (it changed with every write); the
	// master asks the replicas at failover (GET /internal/v1/txn). Kept so
	// records of older nodes still decode.
	LastTxnID map[string]uint64 `json:"last_txn_id,omitempty"`
	// MaxTerm is the term of the last entry in each replica's log: the
	// master never publishes a shard at a term at or below one its replicas
	// already hold (a restored etcd would otherwise roll terms back).
	MaxTerm map[string]int64 `json:"max_term,omitempty"`
	// SeenTerm is the highest term each replica has accepted (led or
	// followed at), kept on the node's disk: a leadership that wrote
	// nothing leaves no entry in any log, yet its term must never be handed
	// out again (after a restore rolled etcd back). The master publishes
	// every new leadership above it.
	SeenTerm  map[string]int64  `json:"seen_term,omitempty"`
	Following map[string]string `json:"following,omitempty"` // shard -> leader node id
	// DiskUsedPct is how full the node's data disk is, in whole percent
	// (0: unknown); it changes the record only when it crosses a percent.
	DiskUsedPct int `json:"disk_used_pct,omitempty"`
	// FlushFailing maps a replica ("db/shard") whose background flush
	// fails to the error (a few, cut short).
	FlushFailing map[string]string `json:"flush_failing,omitempty"`
	Hosted       int               `json:"shards_hosted"` // replicas open on the node
	// Labels are the node's --node-labels (zone=a,rack=r7): a storage
	// cluster's failure_domain names one of their keys.
	Labels map[string]string `json:"labels,omitempty"`
	// Weight is the node's --node-weight, its relative capacity (0 or
	// absent: 1): it holds replicas in proportion.
	Weight int `json:"weight,omitempty"`
	// Protocol is the node-to-node protocol the node speaks
	// (ProtocolVersion; 0: version 1, a node of release 0.1.0).
	Protocol int `json:"protocol,omitempty"`
	// DiskFault, when set, says the node cannot accept writes (its
	// write-ahead log failed): it is no leader candidate, the master hands
	// its leaderships to in-sync replicas, and it clears the fault itself
	// once a write succeeds again. Records without it (older nodes too)
	// take writes.
	DiskFault *DiskFault `json:"disk_fault,omitempty"`
	// DiskPressure, when set, says the node deleted the oldest blocks of
	// its shards because its data disk passed --retention-max-disk-pct.
	DiskPressure *DiskPressure `json:"disk_pressure,omitempty"`
}

// DiskPressure is the last time a storage node deleted old blocks to keep
// its data disk under its limit.
type DiskPressure struct {
	LimitPct int   `json:"limit_pct"` // --retention-max-disk-pct
	UsedPct  int   `json:"used_pct"`  // the disk's use when it began
	Blocks   int   `json:"blocks"`    // blocks deleted
	Before   int64 `json:"before"`    // the deleted blocks held only points before this (unix ns)
	At       int64 `json:"at"`        // unix milliseconds
}

// Writable reports whether the node can accept writes (no DiskFault).
func (n StorageNode) Writable() bool { return n.DiskFault == nil }

// Kinds of DiskFault.
const (
	DiskFull  = "disk_full"  // no space left on the device (ENOSPC)
	DiskError = "disk_error" // any other failed write or sync
)

// DiskFault is why a storage node fenced itself off writes.
type DiskFault struct {
	Kind  string `json:"kind"`  // DiskFull or DiskError
	Path  string `json:"path"`  // the file whose write failed
	Error string `json:"error"` // the error, cut short
	Since int64  `json:"since"` // unix milliseconds
}

// StorageCluster is a configured storage cluster. Empty EtcdEndpoints means the
// cluster lives in Cairn's own etcd; empty Namespace means NS/storage/<name>.
type StorageCluster struct {
	Name          string   `json:"name"`
	EtcdEndpoints []string `json:"etcd_endpoints"`
	Namespace     string   `json:"namespace"`
	// FailureDomain names a node label key (e.g. zone) across whose values
	// the replicas of a shard are spread; "" spreads them over nodes only.
	FailureDomain string `json:"failure_domain,omitempty"`
}

// Database is the DDL of one database.
type Database struct {
	Name           string `json:"name"`
	StorageCluster string `json:"storage_cluster"`
	NumShards      int    `json:"num_shards"`
	ReplicaFactor  int    `json:"replica_factor"`
	// Retention is how long points are kept (0: forever): older ones stop
	// being answered and their space is reclaimed.
	Retention Duration `json:"retention,omitempty"`
	// Ahead and Behead bound the accepted time window around the broker's
	// clock: a point stamped more than Ahead in the future (0: DefaultAhead)
	// or more than Behead in the past (0: unbounded unless Retention says
	// so; see BeheadLimit) is refused.
	Ahead  Duration `json:"ahead,omitempty"`
	Behead Duration `json:"behead,omitempty"`
	// Partition is the time span of one partition of the shards' data (0:
	// chosen from the retention; see PartitionLength). InfluxQL calls it the
	// shard duration.
	Partition Duration `json:"partition,omitempty"`
	// Policy names the database's one retention policy in InfluxQL (empty:
	// DefaultPolicy).
	Policy string `json:"retention_policy,omitempty"`
	// Rollups are the downsampled levels kept beside the raw points, finest
	// first (see Rollup).
	Rollups []Rollup       `json:"rollups,omitempty"`
	Options map[string]any `json:"options"`
	// UID identifies this incarnation of the database: a database dropped
	// and created again under the same name gets a new one, so storage
	// nodes never mistake old shard data for the new database's.
	UID string `json:"uid,omitempty"`
}

// ShardAssignment lists a shard's replicas.
type ShardAssignment struct {
	ID       int      `json:"id"`
	Replicas []string `json:"replicas"`
}

// Assignment is the master-owned placement of one database.
type Assignment struct {
	DB      string            `json:"db"`
	Cluster string            `json:"cluster"`
	Shards  []ShardAssignment `json:"shards"`
}

// Shard status values.
const (
	StatusOnline  = "online"
	StatusOffline = "offline"
)

// ShardState is the master-published leader and term of one shard.
type ShardState struct {
	ID     int    `json:"id"`
	Leader string `json:"leader"`
	Term   int64  `json:"term"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// ShardStates is the state of every shard of one database.
type ShardStates struct {
	DB     string       `json:"db"`
	Shards []ShardState `json:"shards"`
	// UID is the incarnation of the database these states were written for
	// (Database.UID). Storage nodes ignore states of another incarnation: a
	// watcher may deliver a re-created database's config before the deletion
	// of the old one's states. Empty in records of older versions.
	UID string `json:"uid,omitempty"`
	// FirstSets is the etcd cluster id of the txn that created these states
	// together with the database's assignment and every shard's first
	// in-sync set (the master's placement); 0 when it wrote no set. It
	// vouches for the sets only while the states and the assignment are
	// still those of that txn (both keys at the same mod revision): a new
	// leader with an empty log then takes its set from the watched state
	// instead of reading it (storage: placedSet). The master sets it in the
	// placement's txn only; its later writes of the states make records
	// without it.
	FirstSets uint64 `json:"first_sets,omitempty"`
}

// ISR is a shard's in-sync replica set, written by its leader under its term.
type ISR struct {
	Leader   string   `json:"leader"`
	Term     int64    `json:"term"`
	Replicas []string `json:"replicas"`
	// ClusterID is the etcd cluster the leader wrote it in (0: unknown, an
	// older writer). A copy restored into another etcd carries the old id:
	// it is a stale record, not this cluster's history.
	ClusterID uint64 `json:"cluster_id,omitempty"`
}

// ForeignCluster is the ClusterID a restore gives an in-sync record that
// names none (written before records carried it): such a copy is as stale
// as one naming another cluster, and no etcd cluster has this id, so the
// master's stale-set check re-elects its shard.
const ForeignCluster = ^uint64(0)

// Drain marks a storage node that must shed its replicas.
type Drain struct {
	NodeID string `json:"node_id"`
	Since  int64  `json:"since"` // unix milliseconds
}

// ShardID names one shard of one database, as used in map keys.
func ShardID(db string, shard int) string { return db + "/" + strconv.Itoa(shard) }

// ParseShardID splits a ShardID.
func ParseShardID(s string) (db string, shard int, err error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("bad shard id %q", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("bad shard id %q", s)
	}
	return s[:i], n, nil
}

// ReplicaTxn is what a replica answers when the master asks, at failover,
// how far its log goes: its last txn id, the term of that entry, the term
// it currently serves at and the highest term it ever accepted.
type ReplicaTxn struct {
	LastTxnID uint64 `json:"last_txn_id"`
	LastTerm  uint64 `json:"last_term"`
	Term      int64  `json:"term"`
	SeenTerm  int64  `json:"seen_term,omitempty"`
}
