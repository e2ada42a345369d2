package broker

import (
	"context"
	"time"

	"github.com/cairn-db/cairn/storage/wire"
)

// Delete implements influx.Backend: it sends del to every shard of db,
// whose leaders log it like a write (the same retries through a failover,
// the same write timeout); nil once it is durable on the in-sync replicas
// of every shard. A shard led by a node of a release before deletes
// refuses it (400: an unknown entry version).
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
	batches := make([]batch, max(cfg.NumShards, 1))
	for i := range batches {
		batches[i].del = del
	}
	return d.sendToShards(ctx, st, cfg, batches)
}
