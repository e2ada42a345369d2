package broker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// Register keeps a leased record at key until ctx ends: it re-creates the
// session and the record whenever the lease is lost (etcd restarted, a long
// partition) and retries while etcd is unreachable. On exit it revokes the
// lease so peers see the node leave at once.
func Register(ctx context.Context, store coordinator.Store, key string, ttl time.Duration, record func() any, lg *zap.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		s, err := coordinator.NewSession(ctx, store, ttl)
		if err == nil {
			data, _ := json.Marshal(record())
			if _, err = store.Put(ctx, key, data, s.Lease()); err == nil {
				lg.Info("registered", zap.String("key", key))
				backoff = 100 * time.Millisecond
				select {
				case <-ctx.Done():
				case <-s.Done():
					lg.Warn("registration lease lost; registering again", zap.String("key", key))
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			lg.Debug("registration failed", zap.String("key", key), zap.Error(err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// BrokerRecord builds this broker's record.
func BrokerRecord(id, addr string, started time.Time) func() any {
	return func() any { return models.BrokerRecord{NodeID: id, Address: addr, StartedAt: started.UnixMilli()} }
}
