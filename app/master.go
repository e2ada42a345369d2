package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/web"
	"go.uber.org/zap"
)

// runMasterCandidate campaigns for the master key, runs the master's work
// while the term lasts, and campaigns again when it ends. Master work runs
// under a context cancelled the moment the term is lost.
func (a *App) runMasterCandidate(ctx context.Context) {
	lg := a.lg.Named("election")
	el := kv.NewElection(a.store, a.keys.Master())
	bo := backoff.New(100*time.Millisecond, 2*time.Second)
	// Storage nodes that register at another address are noticed from every
	// state this candidate sees, master or not, so the next term republishes
	// their shards even when the move happened while no master ran.
	moves := master.NewMoves()
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() {
		defer close(watched)
		for {
			changed := a.sm.Changed()
			st := a.sm.Snapshot()
			for cluster, ids := range moves.Observe(st) {
				for _, id := range ids {
					lg.Info("storage node registered again at another address; the master republishes its shards at new terms",
						zap.String("cluster", cluster), zap.String("node_id", id), zap.String("address", st.Nodes.At(cluster).At(id).NodeAddress))
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	for ctx.Err() == nil {
		err := a.oneTerm(ctx, el, lg, moves)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			lg.Debug("campaign ended", zap.Error(err))
		} else {
			bo.Reset()
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

func (a *App) oneTerm(ctx context.Context, el *kv.Election, lg *zap.Logger, moves *master.Moves) error {
	s, err := kv.NewSession(ctx, a.store, a.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	var term int64
	resign := false
	defer func() {
		// One deadline covers resigning and revoking, so a stop with etcd
		// down stays within the shutdown budget.
		cctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		if resign {
			// Graceful stop: a standby takes over at once.
			_ = el.Resign(cctx, term)
			lg.Info("resigned master", zap.Int64("term", term))
		}
		_ = s.Close(cctx)
	}()
	rec, _ := json.Marshal(models.MasterRecord{NodeID: a.nodeID, Address: a.cfg.AdvertiseAddr, ElectedAt: time.Now().UnixMilli(), Protocol: models.ProtocolVersion})
	term, err = el.Campaign(ctx, s, rec)
	if err != nil {
		return err
	}
	lg.Info("elected master", zap.Int64("term", term))
	clusterID, err := a.store.ClusterID(ctx)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the term ends the moment the lease is lost
		select {
		case <-s.Done():
			cancel()
		case <-mctx.Done():
		}
	}()
	m := master.New(master.Config{
		Store: a.store, Keys: a.keys, Election: el, Term: term, Session: s, NodeID: a.nodeID,
		State: a.sm.Snapshot, Changed: a.sm.Changed, Logger: a.lg, RebalanceDelay: a.cfg.RebalanceDelay, ClusterID: clusterID,
		Metrics:       a.metrics.master,
		LivenessGrace: a.cfg.LeaseTTL,
		AskTxn:        a.askTxn,
		AskTxns:       a.askTxns,
		Moves:         moves,
		FirstSets:     true,
	})
	a.masterOps.set(m)
	err = m.Run(mctx)
	a.masterOps.set(nil)
	if ctx.Err() != nil {
		resign = true
		return nil
	}
	lg.Warn("master term ended", zap.Int64("term", term), zap.Error(err))
	return err
}

// masterSlot holds the local master while this node is master; otherwise it
// forwards master operations to the elected master (meta.Forwarder).
type masterSlot struct {
	cur     atomic.Pointer[master.Master]
	forward meta.Forwarder
	store   kv.Store // where the master persists its operators
	keys    models.Keys
}

var _ meta.MasterOps = (*masterSlot)(nil)

func (s *masterSlot) set(m *master.Master) { s.cur.Store(m) }

func (s *masterSlot) TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error {
	if m := s.cur.Load(); m != nil {
		return m.TransferLeader(ctx, db, shard, t)
	}
	return s.forward.TransferLeader(ctx, db, shard, t)
}

func (s *masterSlot) Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error) {
	if m := s.cur.Load(); m != nil {
		return m.Rebalance(ctx, dryRun)
	}
	return s.forward.Rebalance(ctx, dryRun)
}

func (s *masterSlot) init(a *App) {
	s.forward = meta.Forwarder{
		Master: func() *models.MasterRecord { return a.sm.Snapshot().Master },
		Self:   a.nodeID,
		Token:  a.cfg.AdminToken,
		Client: &http.Client{Timeout: 10 * time.Second}, // replaced by the peer client once security is set up
	}
}

func (a *App) admin() web.Admin {
	return &meta.Admin{Store: a.store, Keys: a.keys, State: a.sm.Snapshot, Changed: a.sm.Changed, Master: a.masterOps}
}

// askTxn asks a storage node, at failover, for its replicas' last txn ids.
func (a *App) askTxn(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	return client.New(a.askClient).Txn(ctx, client.Peer{ID: node.NodeID, Address: node.Address}, db, shards)
}

// askTxns asks a storage node, at failover, for its replicas' last txn ids
// of many databases in one request; a node that does not serve it (an
// older release) answers master.ErrNoBatch.
func (a *App) askTxns(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
	got, err := client.New(a.askClient).Txns(ctx, client.Peer{ID: node.NodeID, Address: node.Address}, shards)
	if errors.Is(err, client.ErrUnsupported) {
		return nil, fmt.Errorf("%w: %w", master.ErrNoBatch, err)
	}
	return got, err
}
