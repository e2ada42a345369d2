// Package storage is the storage role: a node that registers itself in its
// storage cluster with SableDB's record (node id, address, role, heartbeat,
// last txn id per shard, the leader it follows per shard) and hosts shard
// replicas.
package storage

import (
	"context"
	"encoding/json"
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
	Logger    *zap.Logger
}

// RunNode keeps the node's leased record alive and fresh until ctx ends: it
// is rewritten once per heartbeat (one etcd write per node per heartbeat, 1/s
// with the default 3 s TTL) and re-created whenever the lease is lost.
func RunNode(ctx context.Context, cfg NodeConfig) {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.TTL / 3
	}
	record := func() []byte {
		r := models.StorageNode{NodeID: cfg.NodeID, NodeAddress: cfg.Address, Role: "storage", Cluster: cfg.Cluster,
			LastUpdated: time.Now().UnixMicro()}
		if cfg.Report != nil {
			r.LastTxnID, r.Following = cfg.Report()
		}
		if cfg.MaxTerm != nil {
			r.MaxTerm = cfg.MaxTerm()
		}
		b, _ := json.Marshal(r)
		return b
	}
	coordinator.KeepRegistered(ctx, cfg.Store, cfg.Keys.Node(cfg.NodeID), cfg.TTL, cfg.Heartbeat, record,
		cfg.Logger.With(zap.String("cluster", cfg.Cluster)))
}
