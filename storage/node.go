// Package storage is the storage role: a node that registers itself in its
// storage cluster with SableDB's record (node id, address, role, heartbeat,
// last txn id per shard, the leader it follows per shard) and hosts shard
// replicas.
package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// ShardReport gives the per-shard fields of the node record.
type ShardReport func() (lastTxn map[string]uint64, following map[string]string)

// NodeConfig configures a storage node's registration.
type NodeConfig struct {
	Store     coordinator.Store // the storage cluster's etcd
	Keys      models.ClusterKeys
	NodeID    string
	Address   string
	Cluster   string
	TTL       time.Duration
	Heartbeat time.Duration           // default TTL/3
	Report    ShardReport             // may be nil
	MaxTerm   func() map[string]int64 // may be nil: last log term per shard
	// DataDir is statfs'ed for the record's disk_used_pct; "" leaves it out.
	DataDir string
	Logger  *zap.Logger
	// Registered, when set, runs after each successful (re)registration.
	Registered func()
}

// RunNode keeps the node's leased record alive and fresh until ctx ends: it
// is rewritten once per heartbeat (one etcd write per node per heartbeat, 1/s
// with the default 3 s TTL) and re-created whenever the lease is lost. The
// record is claimed, never overwritten: a live record of the same node id at
// another address (a copied data dir) makes it return a
// coordinator.ErrHeld error naming that address, and the process must stop.
// A record at this very address is this node's own previous run (killed
// within the TTL) and is taken over. It returns nil when ctx ends.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.TTL / 3
	}
	record := func() []byte {
		r := models.StorageNode{NodeID: cfg.NodeID, NodeAddress: cfg.Address, Role: "storage", Cluster: cfg.Cluster,
			LastUpdated: time.Now().UnixMicro()}
		if cfg.Report != nil {
			r.LastTxnID, r.Following = cfg.Report()
		}
		if cfg.DataDir != "" {
			r.DiskUsedPct = DiskUsedPct(cfg.DataDir)
		}
		if cfg.MaxTerm != nil {
			r.MaxTerm = cfg.MaxTerm()
		}
		b, _ := json.Marshal(r)
		return b
	}
	reg := coordinator.Registration{Key: cfg.Keys.Node(cfg.NodeID), TTL: cfg.TTL, Refresh: cfg.Heartbeat, Value: record,
		Owner: NodeOwner(cfg.Address), OnRegistered: cfg.Registered}
	if err := coordinator.KeepRegistered(ctx, cfg.Store, reg, cfg.Logger.With(zap.String("cluster", cfg.Cluster))); err != nil {
		return fmt.Errorf("storage node id %q is in use by another live process: %w", cfg.NodeID, err)
	}
	return nil
}

// NodeOwner recognises a storage node record: its holder is its address, and
// it is ours when that address is ours. A record that does not decode (etcd
// values are untrusted) belongs to nobody we know: it is not ours.
func NodeOwner(address string) func([]byte) (string, bool) {
	return func(b []byte) (string, bool) {
		var r models.StorageNode
		if err := json.Unmarshal(b, &r); err != nil || r.NodeAddress == "" {
			return "an unreadable record", false
		}
		return r.NodeAddress, r.NodeAddress == address
	}
}
