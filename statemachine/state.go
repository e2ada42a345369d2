// Package statemachine keeps a node's local copy of cluster state. Watchers
// (one goroutine per watched prefix) decode etcd changes into events and feed
// ONE bounded queue; ONE consumer applies them with pure reducers and publishes
// an immutable State through an atomic pointer, so reads never lock and keep
// working while etcd is down; Changed wakes whoever waits for the next one.
// What grows with the cluster is held in persistent Maps shared between
// snapshots, so an event costs the size of its record, not of the state. The
// registry of record kinds (kinds.go) drives sources, decoders, reducers and
// the local backup file, which saves the raw keys (kinds by name) so a node
// starting without etcd serves from it.
package statemachine

import (
	"maps"

	"github.com/cairn-db/cairn/models"
)

// State is one immutable snapshot of everything a node knows. Never modify a
// State or its maps after it is published; the reducers copy what they change.
type State struct {
	Master          *models.MasterRecord
	Brokers         map[string]models.BrokerRecord
	StorageClusters map[string]models.StorageCluster
	Drains          map[string]models.Drain
	// The kinds that grow with the cluster (databases, shards, nodes) are
	// persistent Maps: one change copies its path, not the map, so applying
	// an event costs O(size of that record) whatever the state's size.
	Databases   Map[models.Database]
	Assignments Map[models.Assignment]
	ShardStates Map[models.ShardStates]
	Nodes       Map[Map[models.StorageNode]] // cluster -> node id -> record
	ISR         Map[Map[models.ISR]]         // cluster -> shard id -> set
	// Departed remembers storage nodes whose leased record vanished (cluster
	// -> node id), with their last record and when this node saw them go, so
	// a dead node stays visible as "down since" instead of disappearing. A
	// node that registers again leaves it. Bounded by MaxDeparted per
	// cluster; not kept in the local backup.
	Departed map[string]map[string]DepartedNode

	// ModRevs is the mod revision of every key held of the kinds written
	// with compare-and-set (configs, assignments, shard states, drains), per
	// source and name (relative key): guards use it, never re-encoded bytes.
	ModRevs map[string]Map[int64]
	// Invalid lists keys whose current value in etcd did not decode or
	// validate, with why, per source and name; the state keeps their last
	// good value.
	Invalid map[string]map[string]string

	// Synced lists sources that finished a list against etcd since start.
	Synced map[string]bool
	// Revisions is the last revision applied per source.
	Revisions map[string]int64
	// ListedFrom is the etcd cluster id each source was last listed from: a
	// replaced or restored etcd shows here until every source re-listed.
	ListedFrom map[string]uint64
	// FromBackup is true while some state came from the local backup file and
	// etcd has not confirmed it yet.
	FromBackup bool
	// Seq increases with every publication.
	Seq uint64
}

func emptyState() *State {
	return &State{
		Brokers: map[string]models.BrokerRecord{}, StorageClusters: map[string]models.StorageCluster{},
		Drains:   map[string]models.Drain{},
		Departed: map[string]map[string]DepartedNode{},
		ModRevs:  map[string]Map[int64]{}, Invalid: map[string]map[string]string{},
		Synced: map[string]bool{}, Revisions: map[string]int64{}, ListedFrom: map[string]uint64{},
	}
}

// ShardState returns the published state of one shard.
func (s *State) ShardState(db string, shard int) (models.ShardState, bool) {
	ss, ok := s.ShardStates.Get(db)
	if !ok || shard < 0 || shard >= len(ss.Shards) || ss.Shards[shard].ID != shard {
		for _, x := range ss.Shards {
			if x.ID == shard {
				return x, true
			}
		}
		return models.ShardState{}, false
	}
	return ss.Shards[shard], true
}

// ModRev is the mod revision of a key of source (name relative to the
// source's prefix); 0 when the key is not held.
func (s *State) ModRev(source, name string) int64 { return s.ModRevs[source].At(name) }

// NodeRecord finds a live storage node in any cluster.
func (s *State) NodeRecord(id string) (models.StorageNode, bool) {
	for _, nodes := range s.Nodes.All() {
		if n, ok := nodes.Get(id); ok {
			return n, true
		}
	}
	return models.StorageNode{}, false
}

// MaxDeparted bounds the departed nodes remembered per storage cluster; the
// oldest is forgotten first.
const MaxDeparted = 1024

// DepartedNode is a storage node whose record vanished: its last record and
// when its deletion was applied (unix milliseconds).
type DepartedNode struct {
	Record models.StorageNode `json:"record"`
	Since  int64              `json:"since"`
}

// builder applies a batch of events to a copy of a State, cloning each map the
// first time the batch touches it so one batch costs one copy per map.
type builder struct {
	s      *State
	cloned map[string]bool
	tok    *ptoken // owns the Map nodes made in this batch
}

func newBuilder(prev *State) *builder {
	next := *prev
	return &builder{s: &next, cloned: map[string]bool{}, tok: new(ptoken)}
}

func cloneOnce[K comparable, V any](b *builder, name string, m *map[K]V) map[K]V {
	if !b.cloned[name] {
		*m = maps.Clone(*m)
		if *m == nil {
			*m = map[K]V{}
		}
		b.cloned[name] = true
	}
	return *m
}

// nested returns a writable inner map of a cluster-scoped map.
func nested[V any](b *builder, name, cluster string, outer *map[string]map[string]V) map[string]V {
	o := cloneOnce(b, name, outer)
	key := name + "/" + cluster
	if !b.cloned[key] {
		o[cluster] = maps.Clone(o[cluster])
		if o[cluster] == nil {
			o[cluster] = map[string]V{}
		}
		b.cloned[key] = true
	}
	return o[cluster]
}
