package kv

import (
	"context"
	"errors"
	"fmt"
)

// ErrDeposed means a fenced write failed its compare: another candidate holds
// the term now, and the caller must stop acting on the old one.
var ErrDeposed = errors.New("kv: deposed")

// Election is a key race on one key under a session's lease. The winner's term
// is the key's create revision, a fencing token no other term can share.
type Election struct {
	store Store
	key   string
}

// NewElection races on key.
func NewElection(store Store, key string) *Election { return &Election{store: store, key: key} }

// Campaign blocks until this session holds the key (returning its term), the
// session is lost or ctx ends. After winning it reads the key back: etcd can
// return from a campaign after the lease already expired (etcd issue 19597),
// so a win only counts while the key exists with our lease and revision.
func (e *Election) Campaign(ctx context.Context, s *Session, value []byte) (int64, error) {
	for {
		if !s.Alive() {
			return 0, ErrSessionLost
		}
		ok, rev, err := e.store.Txn(ctx, []Cmp{CreateRevIs(e.key, 0)}, []Op{OpPut(e.key, value, s.Lease())})
		if err != nil {
			if errors.Is(err, ErrLeaseNotFound) {
				return 0, ErrSessionLost
			}
			return 0, fmt.Errorf("campaign: %w", err)
		}
		if ok {
			kvp, err := e.store.Get(ctx, e.key)
			if err != nil {
				return 0, fmt.Errorf("campaign: verify: %w", err)
			}
			if kvp == nil || kvp.CreateRev != rev || kvp.Lease != s.Lease() || !s.Alive() {
				return 0, ErrSessionLost
			}
			return rev, nil
		}
		if err := e.waitDeleted(ctx, s); err != nil {
			return 0, err
		}
	}
}

// waitDeleted returns once the key is gone (or may be: on any watch trouble it
// returns so the caller retries the race).
func (e *Election) waitDeleted(ctx context.Context, s *Session) error {
	kvp, err := e.store.Get(ctx, e.key)
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if kvp == nil {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := e.store.Watch(wctx, e.key, kvp.ModRev+1)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.Done():
			return ErrSessionLost
		case r, ok := <-ch:
			if !ok || r.Err != nil {
				return nil
			}
			for _, ev := range r.Events {
				if ev.KV.Key == e.key && ev.Type == EventDelete {
					return nil
				}
			}
		}
	}
}

// Fence is the compare every write of the holder of term must carry.
func (e *Election) Fence(term int64) Cmp { return CreateRevIs(e.key, term) }

// FencedTxn applies ops only while term still holds the key; otherwise it
// returns ErrDeposed and writes nothing. ok is false when one of the caller's
// own compares failed. rev is the store revision after the txn.
func (e *Election) FencedTxn(ctx context.Context, term int64, cmps []Cmp, ops []Op) (ok bool, rev int64, err error) {
	all := append([]Cmp{e.Fence(term)}, cmps...)
	ok, rev, err = e.store.Txn(ctx, all, ops)
	if err != nil || ok {
		return ok, rev, err
	}
	if len(cmps) == 0 {
		return false, rev, ErrDeposed
	}
	// Tell a failed fence from a failed caller compare.
	kvp, err := e.store.Get(ctx, e.key)
	if err != nil {
		return false, rev, err
	}
	if kvp == nil || kvp.CreateRev != term {
		return false, rev, ErrDeposed
	}
	return false, rev, nil
}

// Resign gives up term, if still held, so a standby wins at once.
func (e *Election) Resign(ctx context.Context, term int64) error {
	_, _, err := e.store.Txn(ctx, []Cmp{e.Fence(term)}, []Op{OpDelete(e.key)})
	return err
}
