package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrSessionLost means the session's lease expired or was revoked.
var ErrSessionLost = errors.New("kv: session lost")

// Session is a lease kept alive in the background: the liveness of a node and
// of a master's term.
type Session struct {
	store  Store
	lease  LeaseID
	done   <-chan struct{}
	cancel context.CancelFunc
	once   sync.Once
}

// NewSession grants a lease of ttl and keeps it alive until Close or loss.
func NewSession(ctx context.Context, store Store, ttl time.Duration) (*Session, error) {
	id, err := store.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	done, err := store.KeepAlive(kctx, id)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	return &Session{store: store, lease: id, done: done, cancel: cancel}, nil
}

// resume starts a new keep-alive of the session's lease after the last one
// ended (Done closed), for a lease etcd may still hold: if it does not, the
// new one ends at once. Only the session's one user calls it, between its
// reads of Done; not after Close.
func (s *Session) resume() error {
	kctx, cancel := context.WithCancel(context.Background())
	done, err := s.store.KeepAlive(kctx, s.lease)
	if err != nil {
		cancel()
		return err
	}
	s.cancel()
	s.done, s.cancel = done, cancel
	return nil
}

// Lease is the session's lease.
func (s *Session) Lease() LeaseID { return s.lease }

// Done closes when the lease is lost or the session closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Alive reports whether the lease is still held, as far as this process knows.
func (s *Session) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Close revokes the lease (deleting its keys at once, so peers react without
// waiting for the TTL) and stops the keep-alive.
func (s *Session) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.cancel()
		err = s.store.Revoke(ctx, s.lease)
		if errors.Is(err, ErrLeaseNotFound) {
			err = nil
		}
	})
	return err
}
