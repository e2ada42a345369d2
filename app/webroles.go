package app

import (
	"context"
	"fmt"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/broker/influx"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/internal/problems"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
)

// nodeHealth is every node's web.ClusterHealth: etcd as the last probe saw
// it, the storage clusters whose own etcd does not answer, and what the
// roles still wait for.
type nodeHealth struct{ a *App }

var _ web.ClusterHealth = nodeHealth{}

func (h nodeHealth) EtcdUp() bool                             { return h.a.etcdUp.Load() }
func (h nodeHealth) EtcdAlarms() []string                     { return h.a.currentAlarms() }
func (h nodeHealth) ClustersEtcdDown() []problems.ClusterEtcd { return h.a.clusterEtcdDown() }
func (h nodeHealth) Waiting() string                          { return h.a.waiting() }

// brokerRole is the broker role's part of the HTTP surface (web.BrokerAPI).
type brokerRole struct {
	admin  web.Admin
	data   *broker.Data
	influx *influx.Handler
	ask    master.AskTxnFunc // the storage nodes' last txn question
}

var _ web.BrokerAPI = (*brokerRole)(nil)

func (r *brokerRole) Admin() web.Admin         { return r.admin }
func (r *brokerRole) Data() web.Data           { return r.data }
func (r *brokerRole) Influx() web.InfluxRoutes { return r.influx }
func (r *brokerRole) ReplicaTxn(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	return r.ask(ctx, node, db, shards)
}

var _ web.MasterView = (*masterSlot)(nil)

// IsMaster reports whether this node holds a master term now.
func (s *masterSlot) IsMaster() bool { return s.cur.Load() != nil }

// Operators answers GET /api/v1/operators from etcd: the operators the
// master persisted, on any node.
func (s *masterSlot) Operators(ctx context.Context) (models.OperatorList, error) {
	ops, bad, err := master.ListOperators(ctx, s.store, s.keys)
	if err != nil {
		return models.OperatorList{}, fmt.Errorf("%w: %w", models.ErrUnavailable, err)
	}
	if ops == nil {
		ops = []models.Operator{}
	}
	if bad == nil {
		bad = []string{}
	}
	return models.OperatorList{Operators: ops, Unreadable: bad}, nil
}
