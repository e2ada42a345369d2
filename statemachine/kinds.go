package statemachine

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cairn-db/cairn/models"
)

// Kind says what the keys of a source decode to. Its number is an index into
// the registry and may change; what is saved (the local backup) is its name.
type Kind int

// Source kinds. Cluster-scoped kinds carry the storage cluster's name.
const (
	KindMaster Kind = iota
	KindBrokers
	KindStorageConfig
	KindDatabaseConfig
	KindAssign
	KindShardState
	KindDrain
	KindStorageNodes // cluster scoped
	KindISR          // cluster scoped
	numKinds
)

// kindSpec is one row of the registry of record kinds: everything the state
// store knows about a kind. Sources, the decoder, the reducer and the backup
// format are all driven from it, so adding a kind is one row (plus its
// constant and its State field).
type kindSpec struct {
	name string // saved in the local backup: never changes
	// Main kinds are watched once, in Cairn's own etcd, as source under
	// prefix. Cluster kinds are watched per storage cluster, in the
	// cluster's store, as clusterSource+cluster under clusterPrefix.
	source        string
	prefix        func(models.Keys) string
	clusterSource string
	clusterPrefix func(models.ClusterKeys) string
	// guarded kinds are written with compare-and-set on their mod revision
	// (configs, assignments, states, drains): the state keeps each key's
	// mod revision. The hot, leased ones keep none.
	guarded bool
	// decode turns a raw etcd value into the record, validated; it runs on
	// the watcher's goroutine.
	decode func(name string, value []byte, createRev int64) (any, error)
	// reduce folds a put (del false) or a delete of one key into the state.
	reduce func(b *builder, ev Event, del bool)
	// drop forgets everything of one storage cluster (cluster kinds).
	drop func(b *builder, cluster string)
}

// kinds is the registry, indexed by Kind.
var kinds = [numKinds]kindSpec{
	KindMaster: {name: "master", source: SourceMaster, prefix: models.Keys.Master,
		decode: decodeMaster, reduce: reduceMaster},
	KindBrokers: {name: "brokers", source: SourceBrokers, prefix: models.Keys.BrokersPrefix,
		decode: jsonRecord[models.BrokerRecord](nil), reduce: topLevel("brokers", func(s *State) *map[string]models.BrokerRecord { return &s.Brokers })},
	KindStorageConfig: {name: "storage_config", source: SourceStorageConfig, prefix: models.Keys.StorageConfigPrefix, guarded: true,
		decode: jsonRecord[models.StorageCluster](nil), reduce: topLevel("storage_config", func(s *State) *map[string]models.StorageCluster { return &s.StorageClusters })},
	KindDatabaseConfig: {name: "database_config", source: SourceDatabaseConfig, prefix: models.Keys.DatabaseConfigPrefix, guarded: true,
		decode: jsonRecord[models.Database](nil), reduce: recordMap(func(s *State) *Map[models.Database] { return &s.Databases })},
	KindAssign: {name: "assign", source: SourceAssign, prefix: models.Keys.AssignPrefix, guarded: true,
		decode: jsonRecord(checkAssignment), reduce: recordMap(func(s *State) *Map[models.Assignment] { return &s.Assignments })},
	KindShardState: {name: "shard_state", source: SourceShardState, prefix: models.Keys.ShardStatePrefix, guarded: true,
		decode: jsonRecord(checkShardStates), reduce: recordMap(func(s *State) *Map[models.ShardStates] { return &s.ShardStates })},
	KindDrain: {name: "drain", source: SourceDrain, prefix: models.Keys.DrainPrefix, guarded: true,
		decode: jsonRecord[models.Drain](nil), reduce: topLevel("drain", func(s *State) *map[string]models.Drain { return &s.Drains })},
	KindStorageNodes: {name: "storage_nodes", clusterSource: clusterNodesPrefix, clusterPrefix: models.ClusterKeys.NodesPrefix,
		decode: jsonRecord[models.StorageNode](nil), reduce: reduceNodes, drop: dropNodes},
	KindISR: {name: "isr", clusterSource: clusterISRPrefix, clusterPrefix: models.ClusterKeys.ISRPrefix,
		decode: jsonRecord[models.ISR](nil), reduce: clusterMap(func(s *State) *Map[Map[models.ISR]] { return &s.ISR }),
		drop: dropCluster(func(s *State) *Map[Map[models.ISR]] { return &s.ISR })},
}

// legacyKinds is the order of the integers that backups of version 1 saved
// as kinds. Frozen: it only reads old files.
var legacyKinds = [...]string{"master", "brokers", "storage_config", "database_config", "assign", "shard_state", "drain", "storage_nodes", "isr"}

func (k Kind) spec() (*kindSpec, bool) {
	if k < 0 || k >= numKinds {
		return nil, false
	}
	return &kinds[k], true
}

func (k Kind) String() string {
	if s, ok := k.spec(); ok {
		return s.name
	}
	return "unknown"
}

// ClusterScoped says whether the kind is watched per storage cluster.
func (k Kind) ClusterScoped() bool {
	s, ok := k.spec()
	return ok && s.clusterPrefix != nil
}

// KindByName finds a kind by its saved name.
func KindByName(name string) (Kind, bool) {
	for k := range numKinds {
		if kinds[k].name == name {
			return k, true
		}
	}
	return 0, false
}

// MarshalJSON saves a kind by name.
func (k Kind) MarshalJSON() ([]byte, error) {
	if _, ok := k.spec(); !ok {
		return nil, fmt.Errorf("unknown record kind %d", int(k))
	}
	return json.Marshal(k.String())
}

// UnmarshalJSON reads a kind by name, or by the integer a version 1 backup
// saved.
func (k *Kind) UnmarshalJSON(data []byte) error {
	var name string
	if err := json.Unmarshal(data, &name); err != nil {
		n, nerr := strconv.Atoi(string(data))
		if nerr != nil || n < 0 || n >= len(legacyKinds) {
			return fmt.Errorf("record kind %s: neither a name nor a known number", data)
		}
		name = legacyKinds[n]
	}
	kk, ok := KindByName(name)
	if !ok {
		return fmt.Errorf("unknown record kind %q", name)
	}
	*k = kk
	return nil
}

// jsonRecord decodes a JSON record of type V tolerantly (unknown fields are
// ignored, missing ones defaulted), then checks it when check is set.
func jsonRecord[V any](check func(name string, v V) (V, error)) func(string, []byte, int64) (any, error) {
	return func(name string, value []byte, _ int64) (any, error) {
		var v V
		if err := json.Unmarshal(value, &v); err != nil {
			return nil, err
		}
		if check != nil {
			var err error
			if v, err = check(name, v); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
}

// decodeMaster: the master's term is its key's create revision.
func decodeMaster(_ string, value []byte, createRev int64) (any, error) {
	var v models.MasterRecord
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, err
	}
	if createRev != 0 {
		v.Term = createRev
	}
	return v, nil
}

func reduceMaster(b *builder, ev Event, del bool) {
	if del {
		b.s.Master = nil
		return
	}
	v := ev.Value.(models.MasterRecord)
	b.s.Master = &v
}

// topLevel reduces a kind held in one map of the State, keyed by name.
// name keys the copy-once bookkeeping of a batch.
func topLevel[V any](name string, field func(*State) *map[string]V) func(*builder, Event, bool) {
	return func(b *builder, ev Event, del bool) {
		put(cloneOnce(b, name, field(b.s)), ev, del)
	}
}

// recordMap reduces a kind held in a persistent Map of the State: the
// change copies the key's path, not the map.
func recordMap[V any](field func(*State) *Map[V]) func(*builder, Event, bool) {
	return func(b *builder, ev Event, del bool) {
		m := field(b.s)
		*m = setOrDelete(b.tok, *m, ev, del)
	}
}

func setOrDelete[V any](tok *ptoken, m Map[V], ev Event, del bool) Map[V] {
	if del {
		return m.del(tok, ev.Name)
	}
	return m.set(tok, ev.Name, ev.Value.(V))
}

// clusterMap reduces a cluster-scoped kind held as cluster -> name -> V.
func clusterMap[V any](field func(*State) *Map[Map[V]]) func(*builder, Event, bool) {
	return func(b *builder, ev Event, del bool) {
		outer := field(b.s)
		inner := outer.At(ev.Cluster)
		if del && !inner.Has(ev.Name) {
			return
		}
		*outer = outer.set(b.tok, ev.Cluster, setOrDelete(b.tok, inner, ev, del))
	}
}

// dropCluster forgets one cluster of a cluster-scoped kind.
func dropCluster[V any](field func(*State) *Map[Map[V]]) func(*builder, string) {
	return func(b *builder, cluster string) {
		m := field(b.s)
		*m = m.del(b.tok, cluster)
	}
}

func reduceNodes(b *builder, ev Event, del bool) {
	b.depart(ev, b.s.Nodes.At(ev.Cluster), del)
	clusterMap(func(s *State) *Map[Map[models.StorageNode]] { return &s.Nodes })(b, ev, del)
}

func dropNodes(b *builder, cluster string) {
	b.s.Nodes = b.s.Nodes.del(b.tok, cluster)
	forgetCluster(b, "departed", cluster, &b.s.Departed)
}

// forgetCluster deletes cluster from a cluster-scoped map named name.
func forgetCluster[V any](b *builder, name, cluster string, outer *map[string]map[string]V) {
	delete(cloneOnce(b, name, outer), cluster)
	b.cloned[name+"/"+cluster] = false
}
