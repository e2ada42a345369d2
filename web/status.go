package web

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
)

func (s *Server) health(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok", "node_id": s.cfg.NodeID, "roles": s.cfg.Roles,
		"is_master": s.cfg.IsMaster != nil && s.cfg.IsMaster()})
}

// waiting says what keeps the node from ready ("" when ready): the state
// must come from etcd (every source listed once) or from the backup, and
// every role must serve (Config.Waiting).
func (s *Server) waiting() string {
	st := s.cfg.State()
	if !st.FromBackup && (len(st.Synced) == 0 || !st.Synced[statemachine.SourceMaster] || !st.Synced[statemachine.SourceDatabaseConfig]) {
		return "cluster state not loaded yet"
	}
	if s.cfg.Waiting != nil {
		return s.cfg.Waiting()
	}
	return ""
}

func (s *Server) etcdUp() bool { return s.cfg.EtcdUp == nil || s.cfg.EtcdUp() }

func (s *Server) ready(c *gin.Context) {
	st := s.cfg.State()
	etcd := "up"
	if !s.etcdUp() {
		etcd = "down"
	}
	waiting := s.waiting()
	body := gin.H{"ready": waiting == "", "from_backup": st.FromBackup, "etcd": etcd, "node_id": s.cfg.NodeID}
	if waiting != "" {
		body["waiting_for"] = waiting
		c.JSON(http.StatusServiceUnavailable, body)
		return
	}
	c.JSON(http.StatusOK, body)
}

func (s *Server) master(c *gin.Context) {
	m := s.cfg.State().Master
	if m == nil {
		fail(c, fmt.Errorf("%w: no master elected", models.ErrNotFound))
		return
	}
	c.JSON(http.StatusOK, m)
}

// storageNodeView is a storage node record as the API shows it.
type storageNodeView struct {
	models.StorageNode
	Draining bool `json:"draining"`
}

func (s *Server) nodes(c *gin.Context) {
	st := s.cfg.State()
	brokers := make([]models.BrokerRecord, 0, len(st.Brokers))
	for _, b := range st.Brokers {
		brokers = append(brokers, b)
	}
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].NodeID < brokers[j].NodeID })
	storage := map[string][]storageNodeView{}
	for name := range st.StorageClusters {
		storage[name] = []storageNodeView{}
	}
	for cluster, nodes := range st.Nodes {
		list := make([]storageNodeView, 0, len(nodes))
		for _, n := range nodes {
			_, draining := st.Drains[n.NodeID]
			list = append(list, storageNodeView{StorageNode: n, Draining: draining})
		}
		sort.Slice(list, func(i, j int) bool { return list[i].NodeID < list[j].NodeID })
		storage[cluster] = list
	}
	c.JSON(http.StatusOK, gin.H{"brokers": brokers, "storage": storage})
}

// explore dumps the local state store (LinDB's metadata explore); role narrows
// it to what that role uses.
func (s *Server) explore(c *gin.Context) {
	st := s.cfg.State()
	role := c.Query("role")
	out := gin.H{"node_id": s.cfg.NodeID, "seq": st.Seq, "from_backup": st.FromBackup, "revisions": st.Revisions}
	switch role {
	case "", "master":
		out["master"] = st.Master
		out["storage_clusters"] = st.StorageClusters
		out["databases"] = st.Databases
		out["assignments"] = st.Assignments
		out["shard_states"] = st.ShardStates
		out["storage_nodes"] = st.Nodes
		out["isr"] = st.ISR
		out["drains"] = st.Drains
		if role == "" {
			out["brokers"] = st.Brokers
		}
	case "broker":
		out["master"] = st.Master
		out["brokers"] = st.Brokers
		out["databases"] = st.Databases
		out["shard_states"] = st.ShardStates
		out["storage_nodes"] = st.Nodes
	case "storage":
		out["assignments"] = st.Assignments
		out["shard_states"] = st.ShardStates
		out["storage_nodes"] = st.Nodes
		out["isr"] = st.ISR
	default:
		fail(c, fmt.Errorf("%w: invalid role %q: want master, broker or storage", models.ErrBadInput, role))
		return
	}
	c.JSON(http.StatusOK, out)
}
