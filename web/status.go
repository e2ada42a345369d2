package web

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/cairn-db/cairn/internal/problems"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
)

// waiting says what keeps the node from ready ("" when ready): the state
// must come from etcd (every source listed once) or from the backup, and
// every role must serve (Config.Waiting).
func (s *Server) waiting() string {
	st := s.cfg.State()
	if !st.FromBackup && (len(st.Synced) == 0 || !st.Synced[statemachine.SourceMaster] || !st.Synced[statemachine.SourceDatabaseConfig]) {
		return "cluster state not loaded yet"
	}
	return s.cfg.Health.Waiting()
}

func (s *Server) etcdUp() bool { return s.cfg.Health.EtcdUp() }

func (s *Server) ready(c *gin.Context) {
	st := s.cfg.State()
	etcd := "up"
	if !s.etcdUp() {
		etcd = "down"
	}
	waiting := s.waiting()
	body := gin.H{"ready": waiting == "", "from_backup": st.FromBackup, "etcd": etcd, "node_id": s.cfg.NodeID}
	// An etcd alarm degrades the node but does not make it unready: reads
	// and data writes go on, only metadata changes are refused.
	if degraded := s.degraded(); len(degraded) > 0 {
		body["status"], body["degraded"] = "degraded", degraded
	}
	if waiting != "" {
		body["waiting_for"] = waiting
		c.JSON(http.StatusServiceUnavailable, body)
		return
	}
	c.JSON(http.StatusOK, body)
}

// degraded lists what works only in part, with what to do about it.
func (s *Server) degraded() []string {
	var out []string
	for _, a := range s.cfg.Health.EtcdAlarms() {
		switch a {
		case "nospace":
			out = append(out, "etcd_nospace: etcd is out of space and refuses metadata changes (DDL, failover); reads and data writes go on. "+
				"Compact and defragment etcd or raise its quota (--etcd-quota-backend-bytes), then run etcdctl alarm disarm")
		default:
			out = append(out, "etcd_"+a+": etcd raised its "+strings.ToUpper(a)+" alarm")
		}
	}
	return out
}

func (s *Server) master(c *gin.Context) {
	m := s.cfg.State().Master
	if m == nil {
		fail(c, fmt.Errorf("%w: no master elected", models.ErrNotFound))
		return
	}
	c.JSON(http.StatusOK, m)
}

// storageNodeView is a storage node record as the API shows it: with the
// replicas assigned to it (what a drain still has to move) and the shards
// it leads.
type storageNodeView struct {
	models.StorageNode
	Draining bool `json:"draining"`
	Replicas int  `json:"replicas"`
	Leads    int  `json:"leads"`
}

// downForget is how long a storage node that left holding no replica stays
// listed as down.
const downForget = time.Hour

func (s *Server) problems(c *gin.Context) {
	in := problems.Input{State: s.cfg.State(), Now: time.Now(), EtcdUp: s.etcdUp(), ForgetAfter: downForget,
		EtcdAlarms: s.cfg.Health.EtcdAlarms(), ClustersEtcdDown: s.cfg.Health.ClustersEtcdDown()}
	list := problems.Compute(in)
	counts := map[string]int{problems.Critical: 0, problems.Warning: 0, problems.Info: 0}
	for _, p := range list {
		counts[p.Severity]++
	}
	if list == nil {
		list = []problems.Problem{}
	}
	c.JSON(http.StatusOK, gin.H{"problems": list, "counts": counts})
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
	replicas, leads := map[string]int{}, map[string]int{}
	for name, a := range st.Assignments.All() {
		for _, sh := range a.Shards {
			for _, r := range sh.Replicas {
				replicas[r]++
			}
		}
		for _, x := range st.ShardStates.At(name).Shards {
			if x.Status == models.StatusOnline {
				leads[x.Leader]++
			}
		}
	}
	for cluster, nodes := range st.Nodes.All() {
		list := make([]storageNodeView, 0, nodes.Len())
		for _, n := range nodes.All() {
			_, draining := st.Drains[n.NodeID]
			list = append(list, storageNodeView{StorageNode: n, Draining: draining, Replicas: replicas[n.NodeID], Leads: leads[n.NodeID]})
		}
		sort.Slice(list, func(i, j int) bool { return list[i].NodeID < list[j].NodeID })
		storage[cluster] = list
	}
	down := problems.DownNodes(st, time.Now(), downForget)
	c.JSON(http.StatusOK, gin.H{"brokers": brokers, "storage": storage, "down": down})
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
