package models

// Request and response bodies of the HTTP API that more than the web layer
// handles (the broker, meta and the master take and return them).

// DatabasePatch is the body of PATCH /databases/{name}; nil fields stay.
type DatabasePatch struct {
	NumShards     *int      `json:"num_shards"`
	ReplicaFactor *int      `json:"replica_factor"`
	Retention     *Duration `json:"retention"`
	Ahead         *Duration `json:"ahead"`
	Behead        *Duration `json:"behead"`
	Partition     *Duration `json:"partition"`
	// Policy renames the database's retention policy (InfluxQL's CREATE
	// RETENTION POLICY ... DEFAULT).
	Policy *string `json:"retention_policy"`
	// Rollups replaces the rollup levels ([] removes them).
	Rollups *[]Rollup `json:"rollups"`
}

// StorageClusterPatch is the body of PATCH /api/v1/storage-clusters/{name}:
// the failure domain (a node label key; "" spreads over nodes only).
type StorageClusterPatch struct {
	FailureDomain *string `json:"failure_domain"`
}

// LeaderTransfer is the body of POST .../shards/{id}/leader.
type LeaderTransfer struct {
	NodeID  string `json:"node_id"`
	Unclean bool   `json:"unclean"`
}

// Query carries the parameters of GET /query.
type Query struct {
	DB, Metric string
	Start, End int64
	Tags       map[string]string
}

// ShardView is one shard as GET .../shards shows it.
type ShardView struct {
	ID       int      `json:"id"`
	Replicas []string `json:"replicas"`
	Leader   string   `json:"leader"`
	Term     int64    `json:"term"`
	ISR      []string `json:"isr"`
	Status   string   `json:"status"`
	Reason   string   `json:"reason,omitempty"`
	// Progress (with ?progress=true) is each replica's log position, asked
	// of the nodes when the request came (nothing keeps it in etcd); a
	// replica whose node did not answer in time is in Unanswered.
	Progress   map[string]ReplicaTxn `json:"progress,omitempty"`
	Unanswered []string              `json:"unanswered,omitempty"`
}

// RouteView is GET /route's answer: the shard a series goes to and its
// leader.
type RouteView struct {
	Shard  int       `json:"shard"`
	Leader LeaderRef `json:"leader"`
	Term   int64     `json:"term"`
	Status string    `json:"status"`
}

// NodeRef names a node to call: its id (node-to-node requests are signed
// for it, and no other node accepts them) and its address.
type NodeRef struct {
	NodeID  string
	Address string
}

// LeaderRef names a shard leader.
type LeaderRef struct {
	NodeID  string `json:"node_id"`
	Address string `json:"address"`
}
