package influx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/influxdata/influxql"
)

// Admin applies InfluxQL's DDL as Cairn's metadata changes (the REST API's
// database calls). Errors wrap the models sentinels.
type Admin interface {
	CreateDatabase(ctx context.Context, d models.Database) (models.Database, error)
	UpdateDatabase(ctx context.Context, name string, p models.DatabasePatch) (models.Database, error)
	DeleteDatabase(ctx context.Context, name string) error
}

// Defaults shape a database made by CREATE DATABASE, which says nothing
// of shards or storage clusters (the node's --default-* flags).
type Defaults struct {
	Shards         int
	ReplicaFactor  int
	StorageCluster string
}

// ReadyWait bounds how long CREATE DATABASE waits for the new database's
// shards to come online, so the client's first write finds them.
const ReadyWait = 10 * time.Second

// ddl is a planned statement about databases and their retention policy.
type ddl func(ctx context.Context, h *Handler, db string) ([]query.Row, error)

// planDDL plans stmt if it is a statement about databases or retention
// policies; nil, nil for any other statement.
func planDDL(stmt influxql.Statement) (ddl, error) {
	if del, ok := planDelete(stmt); ok {
		return del, nil
	}
	switch s := stmt.(type) {
	case *influxql.ShowDatabasesStatement:
		return func(_ context.Context, h *Handler, _ string) ([]query.Row, error) {
			return query.ShowDatabases(h.cfg.Backend.Databases()), nil
		}, nil
	case *influxql.ShowRetentionPoliciesStatement:
		return func(_ context.Context, h *Handler, db string) ([]query.Row, error) {
			return h.showPolicies(on(s.Database, db))
		}, nil
	case *influxql.CreateDatabaseStatement:
		return func(ctx context.Context, h *Handler, _ string) ([]query.Row, error) {
			return nil, h.createDatabase(ctx, s)
		}, nil
	case *influxql.DropDatabaseStatement:
		return func(ctx context.Context, h *Handler, _ string) ([]query.Row, error) {
			return nil, h.dropDatabase(ctx, s.Name)
		}, nil
	case *influxql.CreateRetentionPolicyStatement:
		p := policyPatch{Retention: &s.Duration, Replication: &s.Replication, Partition: &s.ShardGroupDuration}
		return func(ctx context.Context, h *Handler, db string) ([]query.Row, error) {
			return nil, h.createPolicy(ctx, on(s.Database, db), s.Name, s.Default, p)
		}, nil
	case *influxql.AlterRetentionPolicyStatement:
		p := policyPatch{Retention: s.Duration, Replication: s.Replication, Partition: s.ShardGroupDuration}
		return func(ctx context.Context, h *Handler, db string) ([]query.Row, error) {
			return nil, h.alterPolicy(ctx, on(s.Database, db), s.Name, p)
		}, nil
	}
	return nil, nil
}

// on is the database a statement names with ON, else the request's.
func on(named, db string) string {
	if named != "" {
		return named
	}
	return db
}

// authorize checks that the request may run every statement: /query is
// mounted with the read scope, and a statement InfluxDB reserves to
// admins (CREATE/DROP DATABASE, retention policies, and here every
// delete: DELETE, DROP SERIES, DROP MEASUREMENT) or to writers needs
// that scope of Cairn's tokens. An error wraps models.ErrUnauthorized or
// models.ErrForbidden.
func (h *Handler) authorize(r *http.Request, stmts []influxql.Statement) error {
	if h.cfg.Authorize == nil {
		return nil
	}
	admin, write := false, false
	for _, s := range stmts {
		switch s.(type) {
		case *influxql.DeleteSeriesStatement, *influxql.DropSeriesStatement, *influxql.DropMeasurementStatement:
			admin = true // InfluxDB asks only the write privilege of the first two; Cairn its admin scope for every delete
		}
		privs, err := s.RequiredPrivileges()
		if err != nil {
			return fmt.Errorf("%w: %w", models.ErrForbidden, err)
		}
		for _, p := range privs {
			admin = admin || p.Admin
			write = write || p.Privilege == influxql.WritePrivilege || p.Privilege == influxql.AllPrivileges
		}
	}
	switch {
	case admin:
		return h.cfg.Authorize(r, true)
	case write:
		return h.cfg.Authorize(r, false)
	}
	return nil
}

// refusal is the HTTP status of an authorize error.
func refusal(err error) int {
	if errors.Is(err, models.ErrForbidden) {
		return http.StatusForbidden
	}
	return http.StatusUnauthorized
}

func (h *Handler) admin() (Admin, error) {
	if h.cfg.Admin == nil {
		return nil, errors.New("this node does not accept DDL")
	}
	return h.cfg.Admin, nil
}

// showPolicies lists db's one retention policy of raw points with its real
// options, then each rollup level (rollup_<interval>, not the default) with
// its own retention: the levels live in the same shards, so they share the
// partition length and replica count.
func (h *Handler) showPolicies(db string) ([]query.Row, error) {
	d, err := h.policyDB(db)
	if err != nil {
		return nil, err
	}
	part, rf := d.PartitionLength().String(), int64(d.ReplicaFactor)
	values := [][]any{{d.PolicyName(), d.Retention.D().String(), part, rf, true}}
	for _, r := range d.Rollups {
		values = append(values, []any{r.Name(), r.Retention.D().String(), part, rf, false})
	}
	return []query.Row{{Columns: []string{"name", "duration", "shardGroupDuration", "replicaN", "default"}, Values: values}}, nil
}

// errPolicyConflict is InfluxDB's answer to a CREATE that contradicts the
// existing policy.
var errPolicyConflict = errors.New("retention policy conflicts with an existing policy")

// createDatabase makes the database with the node's defaults and the
// statement's policy; an existing one succeeds unless the statement's
// policy contradicts it, as in InfluxDB. It answers once the database's
// shards are online (or ReadyWait passed), so the client's first write
// finds them.
func (h *Handler) createDatabase(ctx context.Context, s *influxql.CreateDatabaseStatement) error {
	admin, err := h.admin()
	if err != nil {
		return err
	}
	p := policyPatch{Retention: s.RetentionPolicyDuration, Replication: s.RetentionPolicyReplication}
	if s.RetentionPolicyShardGroupDuration > 0 {
		p.Partition = &s.RetentionPolicyShardGroupDuration
	}
	if s.RetentionPolicyName != "" {
		p.Name = &s.RetentionPolicyName
	}
	def := h.cfg.Defaults
	d := models.Database{Name: s.Name, StorageCluster: def.StorageCluster, NumShards: def.Shards, ReplicaFactor: def.ReplicaFactor}
	if err := p.apply(&d); err != nil {
		return err
	}
	// etcd decides whether the database exists: the local state may still
	// show one dropped a moment ago (DROP DATABASE then CREATE DATABASE).
	_, err = admin.CreateDatabase(ctx, d)
	cur, shown := h.cfg.Backend.Database(s.Name)
	switch {
	case errors.Is(err, models.ErrConflict) && (p.empty() || shown == nil && p.matches(cur)):
		// There with another definition (another broker's defaults): the
		// statement succeeds unless its policy contradicts the database.
	case errors.Is(err, models.ErrConflict):
		return errPolicyConflict
	case errors.Is(err, models.ErrUnavailable) && shown == nil && p.matches(cur):
		return nil // etcd is away; the database is there as asked
	case err != nil:
		return err
	}
	wait, cancel := context.WithTimeout(ctx, ReadyWait)
	defer cancel()
	if err := h.cfg.Backend.AwaitDatabase(wait, s.Name); err != nil {
		return fmt.Errorf("database %s created, but its shards are not all online yet (writes wait for them): %w", s.Name, err)
	}
	return nil
}

// dropDatabase drops db; dropping one that does not exist succeeds, as in
// InfluxDB.
func (h *Handler) dropDatabase(ctx context.Context, db string) error {
	admin, err := h.admin()
	if err != nil {
		return err
	}
	if err := admin.DeleteDatabase(ctx, db); err != nil && !errors.Is(err, models.ErrNotFound) {
		return err
	}
	return nil
}

// createPolicy maps CREATE RETENTION POLICY onto db's options. Cairn keeps
// one policy per database: creating the one it has (same name) succeeds
// when it matches; DEFAULT makes the new policy that one, renamed.
func (h *Handler) createPolicy(ctx context.Context, db, name string, makeDefault bool, p policyPatch) error {
	cur, err := h.policyDB(db)
	if err != nil {
		return err
	}
	if name == cur.PolicyName() {
		if !p.matches(cur) {
			return errors.New("retention policy already exists")
		}
		return nil
	}
	if !makeDefault {
		return fmt.Errorf("one retention policy per database in Cairn (%s has %q): add DEFAULT to replace it, or ALTER RETENTION POLICY %q ON %q",
			db, cur.PolicyName(), cur.PolicyName(), db)
	}
	p.Name = &name
	return h.patchPolicy(ctx, db, p)
}

// alterPolicy maps ALTER RETENTION POLICY onto db's options.
func (h *Handler) alterPolicy(ctx context.Context, db, name string, p policyPatch) error {
	cur, err := h.policyDB(db)
	if err != nil {
		return err
	}
	if name != cur.PolicyName() {
		return fmt.Errorf("retention policy not found: %s", name)
	}
	return h.patchPolicy(ctx, db, p)
}

// policyDB is the database a retention policy statement is about (ON db,
// else the request's).
func (h *Handler) policyDB(db string) (models.Database, error) {
	if db == "" {
		return models.Database{}, errDBRequired
	}
	d, err := h.cfg.Backend.Database(db)
	if err != nil {
		// Not models.ErrNotFound: the statement's own database, not the
		// request's, is the one missing.
		return d, fmt.Errorf("database not found: %s", db)
	}
	return d, nil
}

func (h *Handler) patchPolicy(ctx context.Context, db string, p policyPatch) error {
	admin, err := h.admin()
	if err != nil {
		return err
	}
	var patch models.DatabasePatch
	if err := p.patch(&patch); err != nil {
		return err
	}
	_, err = admin.UpdateDatabase(ctx, db, patch)
	return err
}

// policyPatch is what a statement says of a retention policy; nil fields
// it does not say, and a zero Partition (SHARD DURATION) means "chosen
// from the retention".
type policyPatch struct {
	Retention, Partition *time.Duration
	Replication          *int
	Name                 *string
}

func (p policyPatch) empty() bool {
	return p.Retention == nil && p.Partition == nil && p.Replication == nil && p.Name == nil
}

// matches reports whether d's policy is what p says.
func (p policyPatch) matches(d models.Database) bool {
	return (p.Retention == nil || *p.Retention == d.Retention.D()) &&
		(p.Partition == nil || *p.Partition == 0 || *p.Partition == d.PartitionLength()) &&
		(p.Replication == nil || *p.Replication == d.ReplicaFactor) &&
		(p.Name == nil || *p.Name == d.PolicyName())
}

// apply sets p on a database about to be created.
func (p policyPatch) apply(d *models.Database) error {
	var patch models.DatabasePatch
	if err := p.patch(&patch); err != nil {
		return err
	}
	d.ApplyLifecycle(patch)
	if patch.ReplicaFactor != nil {
		d.ReplicaFactor = *patch.ReplicaFactor
	}
	return nil
}

// patch writes p as a PATCH of the database; InfluxQL's durations must be
// whole seconds.
func (p policyPatch) patch(out *models.DatabasePatch) error {
	conv := func(what string, d *time.Duration) (*models.Duration, error) {
		if d == nil {
			return nil, nil
		}
		if *d < 0 || *d%time.Second != 0 {
			return nil, fmt.Errorf("invalid %s %s: want whole seconds", what, *d)
		}
		v := models.Duration(*d)
		return &v, nil
	}
	var err error
	if out.Retention, err = conv("duration", p.Retention); err != nil {
		return err
	}
	if out.Partition, err = conv("shard duration", p.Partition); err != nil {
		return err
	}
	out.ReplicaFactor, out.Policy = p.Replication, p.Name
	return nil
}
