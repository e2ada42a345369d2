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
	Heartbeat time.Duration // default TTL/3
	Report    ShardReport   // may be nil
	Logger    *zap.Logger
}

// RunNode keeps the node's leased record alive and fresh until ctx ends. The
// record is rewritten once per heartbeat (one etcd write per node per
// heartbeat, 1/s with the default 3 s TTL), and again whenever the lease is
// lost. On exit the lease is revoked so the master reacts at once.
func RunNode(ctx context.Context, cfg NodeConfig) {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.TTL / 3
	}
	lg := cfg.Logger.With(zap.String("cluster", cfg.Cluster))
	key := cfg.Keys.Node(cfg.NodeID)
	record := func() []byte {
		r := models.StorageNode{NodeID: cfg.NodeID, NodeAddress: cfg.Address, Role: "storage", Cluster: cfg.Cluster,
			LastUpdated: time.Now().UnixMicro()}
		if cfg.Report != nil {
			r.LastTxnID, r.Following = cfg.Report()
		}
		b, _ := json.Marshal(r)
		return b
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		s, err := coordinator.NewSession(ctx, cfg.Store, cfg.TTL)
		if err == nil {
			if _, err = cfg.Store.Put(ctx, key, record(), s.Lease()); err == nil {
				lg.Info("storage node registered")
				backoff = 100 * time.Millisecond
				heartbeat(ctx, cfg, s, key, record, lg)
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func heartbeat(ctx context.Context, cfg NodeConfig, s *coordinator.Session, key string, record func() []byte, lg *zap.Logger) {
	t := time.NewTicker(cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			lg.Warn("storage node lease lost; registering again")
			return
		case <-t.C:
			if _, err := cfg.Store.Put(ctx, key, record(), s.Lease()); err != nil {
				lg.Debug("heartbeat failed", zap.Error(err))
			}
		}
	}
}
