// Package storage is the storage role: a node that registers itself in its
// storage cluster with SableDB's record (node id, address, role, time of the
// last change, the leader it follows per shard; last txn ids are asked for
// on demand) and hosts shard replicas.
package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// ShardReport gives the shard fields of the node record: how many replicas
// the node hosts and the leader each followed shard follows.
type ShardReport func() (hosted int, following map[string]string)

// NodeConfig configures a storage node's registration.
type NodeConfig struct {
	Store   kv.Store // the storage cluster's etcd
	Keys    models.ClusterKeys
	NodeID  string
	Address string
	Cluster string
	// Labels and Weight go into the record as they are (--node-labels,
	// --node-weight): placement reads them.
	Labels map[string]string
	Weight int
	TTL    time.Duration
	// MinRewrite is the shortest time between two rewrites of the record
	// (a burst of leader changes costs one write); default TTL/3.
	MinRewrite time.Duration
	// MaxRewrite is the longest time between two rewrites while the record
	// keeps changing (kv.Registration.MaxRefresh); default 10s or
	// MinRewrite if longer.
	MaxRewrite time.Duration
	Report     ShardReport // may be nil; looked at every MinRewrite
	// ReportVersion, when set, moves whenever Report's answer may change
	// (Host.FollowingVersion): Report, O(the node's replicas), is called
	// again only then, not at every look.
	ReportVersion func() uint64
	// FlushFailing gives the record's flush_failing; may be nil.
	FlushFailing func() map[string]string
	// DiskFault gives the record's disk_fault (DiskFence.Fault); may be nil.
	DiskFault func() *models.DiskFault
	// DiskPressure gives the record's disk_pressure (Host.DiskPressure);
	// may be nil.
	DiskPressure func() *models.DiskPressure
	MaxTerm      func() map[string]int64 // may be nil: last log term per shard
	SeenTerm     func() map[string]int64 // may be nil: highest term accepted per shard
	// DataDir is statfs'ed for the record's disk_used_pct; "" leaves it out.
	DataDir string
	Logger  *zap.Logger
	Now     func() time.Time
	// Registered, when set, runs after each successful (re)registration.
	Registered func()
	// Held, when set, gets the record's create revision after each
	// (re)registration (kv.Registration.OnHeld).
	Held func(createRev int64)
}

// RunNode keeps the node's leased record until ctx ends. Liveness is the
// lease alone (keep-alives make no etcd revision): the record is written when
// the node registers and rewritten only when its content really changes (the
// shards it hosts, those it follows and their leaders, the last term in each
// replica's log, the highest term each replica accepted, the disk use percent), at most once per MinRewrite
// (spaced up to MaxRewrite while it keeps changing), with last_updated set to
// the time of that change. An idle node writes nothing.
// The record is claimed, never overwritten: a live record of the same node id
// at another address (a copied data dir) makes it return a
// kv.ErrHeld error naming that address, and the process must stop.
// A record at this very address is this node's own previous run (killed
// within the TTL) and is taken over. It returns nil when ctx ends.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if cfg.MinRewrite == 0 {
		cfg.MinRewrite = cfg.TTL / 3
	}
	if cfg.MaxRewrite == 0 {
		cfg.MaxRewrite = max(cfg.MinRewrite, maxRewrite)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	reg := kv.Registration{Key: cfg.Keys.Node(cfg.NodeID), TTL: cfg.TTL, Refresh: cfg.MinRewrite, MaxRefresh: cfg.MaxRewrite,
		Value: nodeRecord(cfg), Owner: NodeOwner(cfg.Address), OnRegistered: cfg.Registered, OnHeld: cfg.Held}
	if err := kv.KeepRegistered(ctx, cfg.Store, reg, cfg.Logger.With(zap.String("cluster", cfg.Cluster))); err != nil {
		return fmt.Errorf("storage node id %q is in use by another live process: %w", cfg.NodeID, err)
	}
	return nil
}

// maxRewrite is MaxRewrite's default.
const maxRewrite = 10 * time.Second

// nodeRecord returns the record's encoder: the same bytes as long as nothing
// in the record changed, so the registration rewrites it only on a change;
// last_updated is the time of the last change. It runs every refresh on
// every node, and the record's maps grow with the node's replicas: an
// unchanged record is compared, not encoded again, and the shard report is
// asked again only when its version moved (the same map then compares at
// once).
func nodeRecord(cfg NodeConfig) func() []byte {
	var last models.StorageNode // the record without last_updated, as last encoded
	var encoded []byte          // its encoding with last_updated
	var diskPct int             // the disk use it shows (steadyPct)
	var hosted int              // the last shard report, of version reported
	var following map[string]string
	var version uint64
	reported := false
	return func() []byte {
		r := models.StorageNode{NodeID: cfg.NodeID, NodeAddress: cfg.Address, Role: "storage", Cluster: cfg.Cluster,
			Labels: cfg.Labels, Weight: cfg.Weight, Protocol: models.ProtocolVersion}
		if cfg.Report != nil {
			// The version is read before the report: a change made after
			// this read moves it again, and the next look reports anew.
			if cfg.ReportVersion == nil {
				hosted, following = cfg.Report()
			} else if v := cfg.ReportVersion(); !reported || v != version {
				hosted, following = cfg.Report()
				version, reported = v, true
			}
			r.Hosted, r.Following = hosted, following
		}
		if cfg.DataDir != "" {
			diskPct = steadyPct(diskPct, diskUsedPercent(cfg.DataDir))
			r.DiskUsedPct = diskPct
		}
		if cfg.FlushFailing != nil {
			r.FlushFailing = cfg.FlushFailing()
		}
		if cfg.DiskFault != nil {
			r.DiskFault = cfg.DiskFault()
		}
		if cfg.DiskPressure != nil {
			r.DiskPressure = cfg.DiskPressure()
		}
		if cfg.MaxTerm != nil {
			r.MaxTerm = cfg.MaxTerm()
		}
		if cfg.SeenTerm != nil {
			r.SeenTerm = cfg.SeenTerm()
		}
		if encoded != nil && reflect.DeepEqual(r, last) {
			return encoded
		}
		last = r
		r.LastUpdated = cfg.Now().UnixMicro()
		encoded, _ = json.Marshal(r)
		return encoded
	}
}

// NodeOwner recognises a storage node record: its holder is its address, and
// it is ours when that address is ours. A record that does not decode (etcd
// values are untrusted) belongs to nobody we know: it is not ours.
func NodeOwner(address string) func([]byte) (string, bool) {
	return func(b []byte) (string, bool) {
		var r models.StorageNode
		if err := json.Unmarshal(b, &r); err != nil || r.NodeAddress == "" {
			return "an unreadable record", false
		}
		return r.NodeAddress, r.NodeAddress == address
	}
}
