package web

import (
	"context"
	"fmt"

	"github.com/cairn-db/cairn/internal/problems"
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// The node's roles reach the HTTP surface through one small interface each,
// implemented by the role's own type (app wires them; a wrong wiring does
// not compile): ClusterHealth and MasterView on every node, BrokerAPI for
// the broker role, StorageAPI for the storage role. A nil one is a role the
// node does not have.

// ClusterHealth is what every node reports about its links and its start.
type ClusterHealth interface {
	// EtcdUp reports whether etcd answered recently.
	EtcdUp() bool
	// EtcdAlarms lists the alarms etcd raised ("nospace").
	EtcdAlarms() []string
	// ClustersEtcdDown lists the storage clusters on an etcd of their own
	// that does not answer.
	ClustersEtcdDown() []problems.ClusterEtcd
	// Waiting names what the node's roles still wait for before they
	// serve ("" when nothing): /ready answers 503 with it until then.
	Waiting() string
}

// MasterView is the node's view of the master: whether it holds a master
// term now, and the operators the master persisted (GET /api/v1/operators,
// read from etcd on any node).
type MasterView interface {
	IsMaster() bool
	Operators(ctx context.Context) (models.OperatorList, error)
}

// BrokerAPI is the broker role's part: the admin API, the data plane,
// InfluxDB's endpoints and the replicas' progress.
type BrokerAPI interface {
	Admin() Admin
	Data() Data
	Influx() InfluxRoutes
	// ReplicaTxn asks a storage node for its replicas' last txn ids and
	// terms (GET /internal/v1/txn): the shards API's ?progress=true.
	ReplicaTxn(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error)
}

// StorageAPI is the storage role's part: its replication endpoints, why it
// refuses writes, and the disk faults an operator may inject in tests.
type StorageAPI interface {
	// Routes adds the replication endpoints (under /internal/).
	Routes(r gin.IRouter)
	// WriteFence says why the role refuses writes (nil while it takes
	// them): /api/v1/health then answers 503 with it.
	WriteFence() error
	// FaultInjection reports whether POST /api/v1/debug/faults is served
	// (--fault-injection); InjectFault injects a disk fault ("full",
	// "error") into the role's log, or clears it ("").
	FaultInjection() bool
	InjectFault(disk string)
}

// noHealth is the health of a node that was given none (tests): etcd up,
// no alarm, nothing to wait for.
type noHealth struct{}

func (noHealth) EtcdUp() bool                             { return true }
func (noHealth) EtcdAlarms() []string                     { return nil }
func (noHealth) ClustersEtcdDown() []problems.ClusterEtcd { return nil }
func (noHealth) Waiting() string                          { return "" }

// noMaster is the view of a node that was given none: never master, no
// operators list.
type noMaster struct{}

func (noMaster) IsMaster() bool { return false }
func (noMaster) Operators(context.Context) (models.OperatorList, error) {
	return models.OperatorList{}, fmt.Errorf("%w: this node does not list operators", models.ErrNotFound)
}
