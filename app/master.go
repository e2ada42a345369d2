package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/web"
	"go.uber.org/zap"
)

// runMasterCandidate campaigns for the master key, runs the master's work
// while the term lasts, and campaigns again when it ends. Master work runs
// under a context cancelled the moment the term is lost.
func (a *App) runMasterCandidate(ctx context.Context) {
	lg := a.lg.Named("election")
	el := coordinator.NewElection(a.store, a.keys.Master())
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := a.oneTerm(ctx, el, lg)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			lg.Debug("campaign ended", zap.Error(err))
		} else {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (a *App) oneTerm(ctx context.Context, el *coordinator.Election, lg *zap.Logger) error {
	s, err := coordinator.NewSession(ctx, a.store, a.cfg.LeaseTTL)
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
	rec, _ := json.Marshal(models.MasterRecord{NodeID: a.nodeID, Address: a.cfg.AdvertiseAddr, ElectedAt: time.Now().UnixMilli()})
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
		AskTxn: a.askTxn,
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
// forwards master operations to the elected master's HTTP API.
type masterSlot struct {
	cur    atomic.Pointer[master.Master]
	lookup func() *models.MasterRecord
	self   string
	token  string
	client *http.Client
}

var _ broker.MasterOps = (*masterSlot)(nil)

func (s *masterSlot) set(m *master.Master) { s.cur.Store(m) }

func (s *masterSlot) active() bool { return s.cur.Load() != nil }

func (s *masterSlot) TransferLeader(ctx context.Context, db string, shard int, t web.LeaderTransfer) error {
	if m := s.cur.Load(); m != nil {
		return m.TransferLeader(ctx, db, shard, t)
	}
	body, _ := json.Marshal(t)
	_, err := s.forward(ctx, "/api/v1/databases/"+db+"/shards/"+strconv.Itoa(shard)+"/leader", body)
	return err
}

func (s *masterSlot) Rebalance(ctx context.Context, dryRun bool) (any, error) {
	if m := s.cur.Load(); m != nil {
		return m.Rebalance(ctx, dryRun)
	}
	out, err := s.forward(ctx, "/api/v1/rebalance?dry_run="+strconv.FormatBool(dryRun), nil)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(out), nil
}

// forward replays an operation on the master; the master's error envelope
// comes back with its status.
func (s *masterSlot) forward(ctx context.Context, path string, body []byte) ([]byte, error) {
	rec := s.lookup()
	if rec == nil || rec.NodeID == s.self {
		return nil, fmt.Errorf("%w: no master elected", models.ErrUnavailable)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rec.Address+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: master %s unreachable: %v", models.ErrUnavailable, rec.Address, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: reading master answer: %v", models.ErrUnavailable, err)
	}
	if resp.StatusCode >= 300 {
		var env struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(out, &env)
		return nil, fmt.Errorf("%w: %s", sentinelFor(resp.StatusCode), env.Error.Message)
	}
	return out, nil
}

func sentinelFor(status int) error {
	switch status {
	case http.StatusBadRequest:
		return models.ErrBadInput
	case http.StatusNotFound:
		return models.ErrNotFound
	case http.StatusConflict:
		return models.ErrConflict
	case http.StatusUnprocessableEntity:
		return models.ErrImpossible
	case http.StatusUnauthorized:
		return models.ErrUnauthorized
	}
	return models.ErrUnavailable
}

func (s *masterSlot) init(a *App) {
	s.lookup = func() *models.MasterRecord { return a.sm.Snapshot().Master }
	s.self = a.nodeID
	s.token = a.cfg.AdminToken
	s.client = &http.Client{Timeout: 10 * time.Second}
}

func (a *App) admin() web.Admin {
	return &broker.Admin{Store: a.store, Keys: a.keys, State: a.sm.Snapshot, Master: a.masterOps}
}

// askTxn asks a storage node, at failover, for its replicas' last txn ids.
func (a *App) askTxn(ctx context.Context, address, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	return storage.AskTxn(ctx, a.askClient, address, db, shards)
}
