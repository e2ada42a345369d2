package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/gin-gonic/gin"
)

// Admin applies metadata changes (a broker writes them to etcd; the master
// reacts). Errors wrap the models sentinels.
type Admin interface {
	CreateStorageCluster(ctx context.Context, c models.StorageCluster) (models.StorageCluster, error)
	DeleteStorageCluster(ctx context.Context, name string) error
	UpdateStorageCluster(ctx context.Context, name string, p models.StorageClusterPatch) (models.StorageCluster, error)
	CreateDatabase(ctx context.Context, db models.Database) (models.Database, error)
	UpdateDatabase(ctx context.Context, name string, p models.DatabasePatch) (models.Database, error)
	DeleteDatabase(ctx context.Context, name string) error
	SetDrain(ctx context.Context, node string, drain bool) error
	TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error
	Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error)
}

// Data is the data plane (writes, queries, routes).
type Data interface {
	Route(db, series string) (models.RouteView, error)
	// Write stores a line-protocol body; once it returned nil nothing
	// refers to body any more (influx.ReleaseBody).
	Write(ctx context.Context, db, precision string, body []byte) error
	Query(ctx context.Context, q models.Query) (json.RawMessage, error)
}

// decodeStrict reads a JSON body, refusing unknown fields and trailing data.
func decodeStrict(c *gin.Context, v any) error {
	if err := requireJSON(c.Request); err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: body larger than %d bytes", models.ErrBadInput, mbe.Limit)
		}
		return fmt.Errorf("%w: reading body: %w", models.ErrBadInput, err)
	}
	return DecodeStrictJSON(data, v)
}

// DecodeStrictJSON decodes one JSON object, refusing unknown fields and
// trailing data.
func DecodeStrictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed JSON body: %w", models.ErrBadInput, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: malformed JSON body: trailing data", models.ErrBadInput)
	}
	return nil
}

func (s *Server) adminRoutes(api *gin.RouterGroup) {
	rd := api.Group("", s.RequireScope(ScopeRead))
	rd.GET("/storage-clusters", s.listClusters)
	rd.GET("/storage-clusters/:name", s.getCluster)
	rd.GET("/databases", s.listDatabases)
	rd.GET("/databases/:name", s.getDatabase)
	rd.GET("/databases/:name/shards", s.getShards)
	rd.GET("/route", s.route)
	rd.GET("/query", s.query)

	mut := api.Group("", s.RequireScope(ScopeAdmin), s.requireAdminService)
	mut.POST("/storage-clusters", s.createCluster)
	mut.DELETE("/storage-clusters/:name", s.deleteCluster)
	mut.PATCH("/storage-clusters/:name", s.patchCluster)
	mut.POST("/databases", s.createDatabase)
	mut.PATCH("/databases/:name", s.patchDatabase)
	mut.DELETE("/databases/:name", s.deleteDatabase)
	mut.POST("/nodes/:id/drain", func(c *gin.Context) { s.drain(c, true) })
	mut.POST("/nodes/:id/undrain", func(c *gin.Context) { s.drain(c, false) })
	mut.POST("/databases/:name/shards/:id/leader", s.transferLeader)
	mut.POST("/rebalance", s.rebalance)
	api.POST("/write", s.RequireScope(ScopeWrite), s.write) // writePath
}

func (s *Server) requireAdminService(c *gin.Context) {
	if s.admin == nil {
		fail(c, fmt.Errorf("%w: this node has no broker role; send metadata changes to a broker", models.ErrUnavailable))
		return
	}
	c.Next()
}

type clusterView struct {
	models.StorageCluster
	LiveNodes int `json:"live_nodes"`
	Shards    int `json:"shards"`
}

func (s *Server) clusterView(name string) (clusterView, bool) {
	st := s.cfg.State()
	cl, ok := st.StorageClusters[name]
	if !ok {
		return clusterView{}, false
	}
	v := clusterView{StorageCluster: cl, LiveNodes: st.Nodes.At(name).Len()}
	if v.EtcdEndpoints == nil {
		v.EtcdEndpoints = []string{}
	}
	for _, a := range st.Assignments.All() {
		if a.Cluster == name {
			v.Shards += len(a.Shards)
		}
	}
	return v, true
}

func (s *Server) listClusters(c *gin.Context) {
	st := s.cfg.State()
	names := slices.Sorted(maps.Keys(st.StorageClusters))
	out := make([]clusterView, 0, len(names))
	for _, n := range names {
		v, _ := s.clusterView(n)
		out = append(out, v)
	}
	c.JSON(http.StatusOK, gin.H{"storage_clusters": out})
}

func (s *Server) getCluster(c *gin.Context) {
	v, ok := s.clusterView(c.Param("name"))
	if !ok {
		fail(c, fmt.Errorf("%w: storage cluster %q", models.ErrNotFound, c.Param("name")))
		return
	}
	st := s.cfg.State()
	nodes := make([]models.StorageNode, 0, st.Nodes.At(v.Name).Len())
	for _, n := range st.Nodes.At(v.Name).All() {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].NodeID < nodes[j].NodeID })
	c.JSON(http.StatusOK, gin.H{"name": v.Name, "etcd_endpoints": v.EtcdEndpoints, "namespace": v.Namespace,
		"failure_domain": v.FailureDomain, "live_nodes": v.LiveNodes, "shards": v.Shards, "nodes": nodes})
}

func (s *Server) createCluster(c *gin.Context) {
	var body models.StorageCluster
	if err := decodeStrict(c, &body); err != nil {
		fail(c, err)
		return
	}
	out, err := s.admin.CreateStorageCluster(c.Request.Context(), body)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, out)
}

func (s *Server) patchCluster(c *gin.Context) {
	var body models.StorageClusterPatch
	if err := decodeStrict(c, &body); err != nil {
		fail(c, err)
		return
	}
	out, err := s.admin.UpdateStorageCluster(c.Request.Context(), c.Param("name"), body)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) deleteCluster(c *gin.Context) {
	if err := s.admin.DeleteStorageCluster(c.Request.Context(), c.Param("name")); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) listDatabases(c *gin.Context) {
	st := s.cfg.State()
	out := make([]models.Database, 0, st.Databases.Len())
	for _, d := range st.Databases.All() {
		out = append(out, withOptions(d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	c.JSON(http.StatusOK, gin.H{"databases": out})
}

func withOptions(d models.Database) models.Database {
	if d.Options == nil {
		d.Options = map[string]any{}
	}
	return d
}

func (s *Server) getDatabase(c *gin.Context) {
	d, ok := s.cfg.State().Databases.Get(c.Param("name"))
	if !ok {
		fail(c, fmt.Errorf("%w: database %q", models.ErrNotFound, c.Param("name")))
		return
	}
	c.JSON(http.StatusOK, withOptions(d))
}

func (s *Server) createDatabase(c *gin.Context) {
	var body models.Database
	if err := decodeStrict(c, &body); err != nil {
		fail(c, err)
		return
	}
	out, err := s.admin.CreateDatabase(c.Request.Context(), body)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, withOptions(out))
}

func (s *Server) patchDatabase(c *gin.Context) {
	var body models.DatabasePatch
	if err := decodeStrict(c, &body); err != nil {
		fail(c, err)
		return
	}
	out, err := s.admin.UpdateDatabase(c.Request.Context(), c.Param("name"), body)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, withOptions(out))
}

func (s *Server) deleteDatabase(c *gin.Context) {
	if err := s.admin.DeleteDatabase(c.Request.Context(), c.Param("name")); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) getShards(c *gin.Context) {
	name := c.Param("name")
	st := s.cfg.State()
	d, ok := st.Databases.Get(name)
	if !ok {
		fail(c, fmt.Errorf("%w: database %q", models.ErrNotFound, name))
		return
	}
	views := ShardViews(st.Assignments.At(name), st.ShardStates.At(name), st.ISR.At(d.StorageCluster))
	switch c.Query("progress") {
	case "", "false":
	case "true":
		if s.cfg.Broker == nil {
			fail(c, fmt.Errorf("%w: progress is asked of the storage nodes by brokers only", models.ErrBadInput))
			return
		}
		AddProgress(c.Request.Context(), s.cfg.Broker.ReplicaTxn, progressTimeout, name, views, st.Nodes.At(d.StorageCluster))
	default:
		fail(c, fmt.Errorf("%w: progress must be true or false, not %q", models.ErrBadInput, c.Query("progress")))
		return
	}
	c.JSON(http.StatusOK, gin.H{"shards": views})
}

// ShardViews joins assignment, state and in-sync sets of one database.
func ShardViews(a models.Assignment, ss models.ShardStates, isr statemachine.Map[models.ISR]) []models.ShardView {
	states := map[int]models.ShardState{}
	for _, x := range ss.Shards {
		states[x.ID] = x
	}
	out := make([]models.ShardView, 0, len(a.Shards))
	for _, sh := range a.Shards {
		st := states[sh.ID]
		v := models.ShardView{ID: sh.ID, Replicas: sh.Replicas, Leader: st.Leader, Term: st.Term, Status: st.Status, Reason: st.Reason}
		if v.Status == "" {
			v.Status = models.StatusOffline
			v.Reason = "no leader published yet"
		}
		if set, ok := isr.Get(models.ShardID(a.DB, sh.ID)); ok && set.Term == st.Term {
			v.ISR = set.Replicas
		} else if st.Leader != "" {
			v.ISR = []string{st.Leader}
		}
		if v.ISR == nil {
			v.ISR = []string{}
		}
		if v.Replicas == nil {
			v.Replicas = []string{}
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) drain(c *gin.Context, on bool) {
	if err := s.admin.SetDrain(c.Request.Context(), c.Param("id"), on); err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"node_id": c.Param("id"), "draining": on})
}

func (s *Server) transferLeader(c *gin.Context) {
	id, err := strconv.Atoi(c.Param("id"))
	if err != nil || id < 0 {
		fail(c, fmt.Errorf("%w: invalid shard id %q", models.ErrBadInput, c.Param("id")))
		return
	}
	var body models.LeaderTransfer
	if err := decodeStrict(c, &body); err != nil {
		fail(c, err)
		return
	}
	if err := s.admin.TransferLeader(c.Request.Context(), c.Param("name"), id, body); err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"db": c.Param("name"), "shard": id, "node_id": body.NodeID})
}

func (s *Server) rebalance(c *gin.Context) {
	dry := false
	if v := c.Query("dry_run"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail(c, fmt.Errorf("%w: invalid dry_run %q", models.ErrBadInput, v))
			return
		}
		dry = b
	}
	plan, err := s.admin.Rebalance(c.Request.Context(), dry)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, plan)
}
