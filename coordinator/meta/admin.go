// Package meta owns metadata changes: it validates DDL (databases) and
// storage-cluster configuration against the local state copy, writes them to
// etcd for the master to react to, and hands operations only the elected
// master performs to that master (in process, or forwarded over HTTP).
package meta

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// MaxShards bounds num_shards of one database.
const MaxShards = 4096

// MasterOps are the operations only the elected master performs; a broker
// that is not master forwards them.
type MasterOps interface {
	TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error
	Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error)
}

// Admin writes metadata changes to etcd after validating them against the
// local state. It is the web layer's Admin.
type Admin struct {
	Store  kv.Store
	Keys   models.Keys
	State  func() *statemachine.State
	Master MasterOps // the local master if this node is one, else a forwarder
	// Changed, when set, signals the local state's next publication: a
	// database's create or drop answers once this node's state shows it
	// (at most seenWait), so the caller's next request here (a write to
	// the new database) is not refused by a state a moment behind etcd.
	Changed func() <-chan struct{}
}

// seenWait bounds how long a create or drop waits for the local state to
// show it; past it the answer goes anyway (the change is in etcd).
const seenWait = 2 * time.Second

// awaitSeen waits until seen holds of the local state, for at most
// seenWait or until ctx ends.
func (a *Admin) awaitSeen(ctx context.Context, seen func(*statemachine.State) bool) {
	if a.Changed == nil {
		return
	}
	t := time.NewTimer(seenWait)
	defer t.Stop()
	for {
		next := a.Changed() // before the look: a publication between them is not missed
		if seen(a.State()) {
			return
		}
		select {
		case <-next:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func newUID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{models.ErrBadInput}, a...)...)
}

// unavailable words a failed etcd call for the caller, saying
// truthfully whether anything may have changed, and labels it with the
// API's sentinel (models.Codes) while keeping the store's in the chain.
func unavailable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrNoSpace):
		return models.Mark(fmt.Errorf("%w: etcd is out of space (NOSPACE alarm) and refuses metadata changes; nothing changed. "+
			"Reads and data writes keep working. To recover, free space in etcd (etcdctl compact <revision>, then etcdctl defrag) "+
			"or raise its quota (--etcd-quota-backend-bytes for an embedded member), then clear the alarm with etcdctl alarm disarm", err), models.ErrNoSpace)
	// A deadline inside ErrUnavailable is a call that never reached etcd
	// (nothing changed); a bare one may have cut a write short.
	case errors.Is(err, kv.ErrOutcomeUnknown),
		errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kv.ErrUnavailable):
		if !errors.Is(err, kv.ErrOutcomeUnknown) {
			err = fmt.Errorf("%w: %w", kv.ErrOutcomeUnknown, err)
		}
		return models.Mark(fmt.Errorf("outcome unknown: etcd did not confirm the change in time, so it may or may not have been applied; "+
			"safe to retry the same request (a repeated create answers with the existing identical object, a repeated delete 404) (%w)", err), models.ErrOutcomeUnknown)
	case errors.Is(err, kv.ErrUnavailable):
		return fmt.Errorf("%w: etcd unreachable, nothing changed; retry: %w", models.ErrUnavailable, err)
	}
	return err
}

// create writes key only if absent. When it exists already, same(existing)
// decides: an identical object (a retried create whose first answer was
// lost) is returned as if just created; anything else is a conflict.
func create[T any](ctx context.Context, a *Admin, key string, v T, what string, same func(T) bool) (T, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return v, err
	}
	ok, _, err := a.Store.Txn(ctx, []kv.Cmp{kv.CreateRevIs(key, 0)}, []kv.Op{kv.OpPut(key, data, 0)})
	if err != nil {
		return v, unavailable(err)
	}
	if ok {
		return v, nil
	}
	kvp, err := a.Store.Get(ctx, key)
	if err != nil {
		return v, unavailable(err)
	}
	var cur T
	if kvp != nil && json.Unmarshal(kvp.Value, &cur) == nil && same(cur) {
		return cur, nil
	}
	return v, fmt.Errorf("%w: %s already exists with a different definition", models.ErrConflict, what)
}

func validEndpoint(e string) bool {
	u, err := url.Parse(e)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Port() != ""
}

// CreateStorageCluster validates and creates a storage cluster's config.
func (a *Admin) CreateStorageCluster(ctx context.Context, c models.StorageCluster) (models.StorageCluster, error) {
	if !models.ValidName(c.Name) {
		return c, bad("invalid storage cluster name %q: want [A-Za-z0-9_-]{1,64}", c.Name)
	}
	for _, e := range c.EtcdEndpoints {
		if !validEndpoint(e) {
			return c, bad("invalid etcd endpoint %q: want http(s)://host:port", e)
		}
	}
	if c.Namespace != "" && (!strings.HasPrefix(c.Namespace, "/") || strings.HasSuffix(c.Namespace, "/")) {
		return c, bad("invalid namespace %q: must start with / and not end with /", c.Namespace)
	}
	if c.FailureDomain != "" && !models.ValidName(c.FailureDomain) {
		return c, bad("invalid failure_domain %q: want a node label key, [A-Za-z0-9_-]{1,64}", c.FailureDomain)
	}
	if c.EtcdEndpoints == nil {
		c.EtcdEndpoints = []string{}
	}
	same := func(cur models.StorageCluster) bool { return sameStorageCluster(cur, c) }
	if cur, ok := a.State().StorageClusters[c.Name]; ok && same(cur) {
		return cur, nil
	}
	return create(ctx, a, a.Keys.StorageConfig(c.Name), c, fmt.Sprintf("storage cluster %q", c.Name), same)
}

// DeleteStorageCluster removes a storage cluster no database uses.
func (a *Admin) DeleteStorageCluster(ctx context.Context, name string) error {
	st := a.State()
	for _, d := range st.Databases.All() {
		if d.StorageCluster == name {
			return fmt.Errorf("%w: storage cluster %q is used by database %q", models.ErrConflict, name, d.Name)
		}
	}
	ok, err := a.Store.Delete(ctx, a.Keys.StorageConfig(name))
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return fmt.Errorf("%w: storage cluster %q", models.ErrNotFound, name)
	}
	return nil
}

// checkReplicas refuses a replica factor above the cluster's usable nodes.
func checkReplicas(st *statemachine.State, cluster string, rf int) error {
	live := 0
	for id := range st.Nodes.At(cluster).All() {
		if _, draining := st.Drains[id]; !draining {
			live++
		}
	}
	if rf > live {
		return fmt.Errorf("%w: replica_factor %d exceeds the %d live storage nodes of cluster %q", models.ErrImpossible, rf, live, cluster)
	}
	return nil
}

// sameDatabase reports whether cur is the database that the request d asks
// for (its uid aside: every create draws a new one).
func sameDatabase(cur, d models.Database) bool {
	if cur.Name != d.Name || cur.StorageCluster != d.StorageCluster || cur.NumShards != d.NumShards ||
		cur.ReplicaFactor != d.ReplicaFactor || len(cur.Options) != len(d.Options) || !sameLifecycle(cur, d) {
		return false
	}
	// Options are compared as JSON (keys sorted), as they were stored.
	a, errA := json.Marshal(cur.Options)
	b, errB := json.Marshal(d.Options)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// sameStorageCluster is sameDatabase for storage clusters.
func sameStorageCluster(cur, c models.StorageCluster) bool {
	return cur.Name == c.Name && cur.Namespace == c.Namespace && slices.Equal(cur.EtcdEndpoints, c.EtcdEndpoints) &&
		cur.FailureDomain == c.FailureDomain
}

// CreateDatabase validates and creates a database; a retried identical create
// answers with the database the first one made.
func (a *Admin) CreateDatabase(ctx context.Context, d models.Database) (models.Database, error) {
	if !models.ValidName(d.Name) {
		return d, bad("invalid database name %q: want [A-Za-z0-9_-]{1,64}", d.Name)
	}
	if d.StorageCluster == "" {
		d.StorageCluster = "default"
	}
	if d.NumShards < 1 || d.NumShards > MaxShards {
		return d, bad("invalid num_shards %d: want 1..%d", d.NumShards, MaxShards)
	}
	if d.ReplicaFactor == 0 {
		d.ReplicaFactor = 1
	}
	if d.ReplicaFactor < 1 {
		return d, bad("invalid replica_factor %d: want at least 1", d.ReplicaFactor)
	}
	if err := checkLifecycle(&d); err != nil {
		return d, err
	}
	if d.Options == nil {
		d.Options = map[string]any{}
	}
	// A create repeated after a lost answer (a timeout, a 503 "outcome
	// unknown") finds its own database: the same definition answers as the
	// first create would have, anything else is a conflict.
	// The local state may lag etcd: a database it still shows may have
	// been dropped a moment ago (a DROP then CREATE of the same name), so
	// only etcd answers whether it exists; the local copy answers only
	// while etcd cannot.
	same := func(cur models.Database) bool { return sameDatabase(cur, d) }
	st := a.State()
	local, shown := st.Databases.Get(d.Name)
	if _, ok := st.StorageClusters[d.StorageCluster]; !ok && !shown {
		return d, fmt.Errorf("%w: storage cluster %q does not exist", models.ErrImpossible, d.StorageCluster)
	}
	if err := checkReplicas(st, d.StorageCluster, d.ReplicaFactor); err != nil && !shown {
		return d, err
	}
	d.UID = newUID()
	got, err := create(ctx, a, a.Keys.DatabaseConfig(d.Name), d, fmt.Sprintf("database %q", d.Name), same)
	if err != nil && shown && same(local) && errors.Is(err, kv.ErrUnavailable) && !errors.Is(err, kv.ErrOutcomeUnknown) {
		return local, nil // etcd is away; the create is a repeat of what the state shows
	}
	if err == nil {
		a.awaitSeen(ctx, func(st *statemachine.State) bool { return st.Databases.At(d.Name).UID == got.UID })
	}
	return got, err
}

// UpdateDatabase grows num_shards, changes replica_factor or the data
// lifecycle (retention, ahead, behead, partition, retention_policy). The write is guarded by the config's
// mod revision so two concurrent PATCHes cannot lose one another.
func (a *Admin) UpdateDatabase(ctx context.Context, name string, p models.DatabasePatch) (models.Database, error) {
	kvp, err := a.Store.Get(ctx, a.Keys.DatabaseConfig(name))
	if err != nil {
		return models.Database{}, unavailable(err)
	}
	if kvp == nil {
		return models.Database{}, fmt.Errorf("%w: database %q", models.ErrNotFound, name)
	}
	var d models.Database
	if err := json.Unmarshal(kvp.Value, &d); err != nil {
		return d, fmt.Errorf("database %q config unreadable: %w", name, err)
	}
	lifecycle := d.ApplyLifecycle(p)
	if p.NumShards == nil && p.ReplicaFactor == nil && !lifecycle {
		return d, bad("nothing to change: give num_shards, replica_factor, retention, ahead, behead, partition, retention_policy or rollups")
	}
	if err := checkLifecycle(&d); err != nil {
		return d, err
	}
	if p.NumShards != nil {
		n := *p.NumShards
		switch {
		case n < 1 || n > MaxShards:
			return d, bad("invalid num_shards %d: want 1..%d", n, MaxShards)
		case n < d.NumShards:
			return d, fmt.Errorf("%w: num_shards can only grow (%d -> %d): series are hashed over the shard count, and removing shards would need their data merged elsewhere", models.ErrImpossible, d.NumShards, n)
		}
		d.NumShards = n
	}
	if p.ReplicaFactor != nil {
		rf := *p.ReplicaFactor
		if rf < 1 {
			return d, bad("invalid replica_factor %d: want at least 1", rf)
		}
		if rf > d.ReplicaFactor {
			if err := checkReplicas(a.State(), d.StorageCluster, rf); err != nil {
				return d, err
			}
		}
		d.ReplicaFactor = rf
	}
	data, err := json.Marshal(d)
	if err != nil {
		return d, err
	}
	ok, _, err := a.Store.Txn(ctx, []kv.Cmp{kv.ModRevIs(kvp.Key, kvp.ModRev)}, []kv.Op{kv.OpPut(kvp.Key, data, 0)})
	if err != nil {
		return d, unavailable(err)
	}
	if !ok {
		return d, fmt.Errorf("%w: database %q changed concurrently; retry", models.ErrConflict, name)
	}
	return d, nil
}

// DeleteDatabase removes a database's config; the master drops its shards.
func (a *Admin) DeleteDatabase(ctx context.Context, name string) error {
	ok, err := a.Store.Delete(ctx, a.Keys.DatabaseConfig(name))
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return fmt.Errorf("%w: database %q", models.ErrNotFound, name)
	}
	a.awaitSeen(ctx, func(st *statemachine.State) bool { return !st.Databases.Has(name) })
	return nil
}

// SetDrain marks a storage node draining (or clears the mark).
func (a *Admin) SetDrain(ctx context.Context, node string, drain bool) error {
	if !models.ValidName(node) {
		return bad("invalid node id %q", node)
	}
	st := a.State()
	if _, ok := st.NodeRecord(node); !ok {
		if _, marked := st.Drains[node]; !marked {
			return fmt.Errorf("%w: storage node %q is not live", models.ErrNotFound, node)
		}
	}
	if !drain {
		_, err := a.Store.Delete(ctx, a.Keys.Drain(node))
		return unavailable(err)
	}
	data, _ := json.Marshal(models.Drain{NodeID: node, Since: time.Now().UnixMilli()})
	_, err := a.Store.Put(ctx, a.Keys.Drain(node), data, 0)
	return unavailable(err)
}

// TransferLeader validates a leader transfer and hands it to the master.
func (a *Admin) TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error {
	st := a.State()
	as, ok := st.Assignments.Get(db)
	if !ok {
		return fmt.Errorf("%w: database %q", models.ErrNotFound, db)
	}
	if shard >= len(as.Shards) {
		return fmt.Errorf("%w: database %q has no shard %d", models.ErrNotFound, db, shard)
	}
	if !models.ValidName(t.NodeID) {
		return bad("invalid node_id %q", t.NodeID)
	}
	if a.Master == nil {
		return fmt.Errorf("%w: no master reachable", models.ErrUnavailable)
	}
	return masterErr(a.Master.TransferLeader(ctx, db, shard, t))
}

// Rebalance hands a rebalance (or its dry run) to the master.
func (a *Admin) Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error) {
	if a.Master == nil {
		return models.PlanView{}, fmt.Errorf("%w: no master reachable", models.ErrUnavailable)
	}
	out, err := a.Master.Rebalance(ctx, dryRun)
	return out, masterErr(err)
}

// masterErr labels the etcd layer's errors out of a master operation; the
// master's own (models sentinels) pass as they are.
func masterErr(err error) error {
	switch {
	case errors.Is(err, kv.ErrNoSpace):
		return models.Mark(err, models.ErrNoSpace)
	case errors.Is(err, kv.ErrOutcomeUnknown):
		return models.Mark(err, models.ErrOutcomeUnknown)
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, kv.ErrDeposed):
		return models.Mark(err, models.ErrUnavailable)
	}
	return err
}
