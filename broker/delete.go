package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/wire"
)

// Delete implements influx.Backend: it sends del to every shard of db,
// whose leaders log it like a write (the same retries through a failover,
// the same write timeout); nil once it is durable on the in-sync replicas
// of every shard. While a replica of db is on a release before deletes
// (a rolling upgrade), it is refused: that node could not apply the entry
// its leader logged.
func (d *Data) Delete(ctx context.Context, db string, del *wire.Delete) (err error) {
	defer func(start time.Time) { d.recordWrite(db, 0, 0, start, err) }(time.Now())
	if err := del.Validate(); err != nil {
		return bad("%v", err)
	}
	st := d.State()
	cfg, err := d.database(st, db)
	if err != nil {
		return err
	}
	if id, proto, ok := olderReplica(st, cfg); ok {
		return fmt.Errorf("%w: storage node %s, a replica of %q, runs a release before deletes (protocol %d, deletes need %d); "+
			"finish the upgrade, then delete again (nothing was deleted)", models.ErrUnavailable, id, db, proto, models.ProtocolDeletes)
	}
	batches := make([]batch, max(cfg.NumShards, 1))
	for i := range batches {
		batches[i].del = del
	}
	return d.sendToShards(ctx, st, cfg, batches, nil)
}

// olderReplica names a live replica of cfg's shards whose node speaks a
// protocol before deletes, with that protocol (a replica not live now has
// no record to tell).
func olderReplica(st *statemachine.State, cfg models.Database) (string, int, bool) {
	a, ok := st.Assignments.Get(cfg.Name)
	if !ok {
		return "", 0, false
	}
	nodes := st.Nodes.At(cfg.StorageCluster)
	for _, s := range a.Shards {
		for _, id := range s.Replicas {
			if n, live := nodes.Get(id); live && max(n.Protocol, 1) < models.ProtocolDeletes {
				return id, max(n.Protocol, 1), true
			}
		}
	}
	return "", 0, false
}
