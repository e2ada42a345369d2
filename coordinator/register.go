package coordinator

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// KeepRegistered keeps a leased record at key until ctx ends: the liveness
// record of a broker or storage node. It rewrites the value every refresh
// (0: never; a heartbeat costs one etcd write per node per refresh), creates
// a new session and record whenever the lease is lost (etcd restarted, a long
// partition), and retries with back-off while etcd is unreachable. On exit it
// revokes the lease so peers see the node leave at once.
func KeepRegistered(ctx context.Context, store Store, key string, ttl, refresh time.Duration, value func() []byte, lg *zap.Logger) {
	lg = lg.With(zap.String("key", key))
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		s, err := NewSession(ctx, store, ttl)
		if err == nil {
			if _, err = store.Put(ctx, key, value(), s.Lease()); err == nil {
				lg.Info("registered")
				backoff = 100 * time.Millisecond
				holdRegistration(ctx, store, s, key, refresh, value, lg)
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			lg.Debug("registration failed", zap.Error(err))
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

// holdRegistration refreshes the record until ctx ends or the lease is lost.
func holdRegistration(ctx context.Context, store Store, s *Session, key string, refresh time.Duration, value func() []byte, lg *zap.Logger) {
	var tick <-chan time.Time
	if refresh > 0 {
		t := time.NewTicker(refresh)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			lg.Warn("registration lease lost; registering again")
			return
		case <-tick:
			if _, err := store.Put(ctx, key, value(), s.Lease()); err != nil {
				lg.Debug("refresh failed", zap.Error(err))
			}
		}
	}
}
