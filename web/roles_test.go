package web_test

import (
	"context"
	"errors"

	"github.com/cairn-db/cairn/internal/problems"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
	"github.com/gin-gonic/gin"
)

// testBroker is a broker role made of the parts a test gives.
type testBroker struct {
	admin  web.Admin
	data   web.Data
	influx web.InfluxRoutes
}

func (b testBroker) Admin() web.Admin         { return b.admin }
func (b testBroker) Data() web.Data           { return b.data }
func (b testBroker) Influx() web.InfluxRoutes { return b.influx }
func (b testBroker) ReplicaTxn(context.Context, models.NodeRef, string, []int) (map[int]models.ReplicaTxn, error) {
	return nil, errors.New("no storage node in this test")
}

// testHealth is a node's health as a test sets it.
type testHealth struct {
	down    bool
	alarms  []string
	waiting func() string
}

func (h testHealth) EtcdUp() bool                             { return !h.down }
func (h testHealth) EtcdAlarms() []string                     { return h.alarms }
func (h testHealth) ClustersEtcdDown() []problems.ClusterEtcd { return nil }
func (h testHealth) Waiting() string {
	if h.waiting == nil {
		return ""
	}
	return h.waiting()
}

// testMaster is a master view listing the operators a test gives.
type testMaster struct {
	ops func(context.Context) (models.OperatorList, error)
}

func (m testMaster) IsMaster() bool { return false }
func (m testMaster) Operators(ctx context.Context) (models.OperatorList, error) {
	return m.ops(ctx)
}

// testStorage is a storage role with the routes, fence and fault injection
// a test gives.
type testStorage struct {
	routes func(gin.IRouter)
	fence  func() error
	faults func(disk string)
}

func (s testStorage) Routes(r gin.IRouter) {
	if s.routes != nil {
		s.routes(r)
	}
}

func (s testStorage) WriteFence() error {
	if s.fence == nil {
		return nil
	}
	return s.fence()
}

func (s testStorage) FaultInjection() bool    { return s.faults != nil }
func (s testStorage) InjectFault(disk string) { s.faults(disk) }
