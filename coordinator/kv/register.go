package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"go.uber.org/zap"
)

// ErrHeld means another live process holds a leased record this process
// wanted: two processes with one node id. The holder must go first.
var ErrHeld = errors.New("kv: record held by another live process")

// errWaitCut: the wait for another holder ended early (our lease or ctx).
var errWaitCut = errors.New("kv: wait for the record's holder cut short")

// errContended: the record changed under every attempt of one claim.
var errContended = errors.New("kv: record changed under every attempt")

// claimAttempts bounds one claim: each round loses only to another writer of
// the same key, which a node id shared by two processes makes rare.
const claimAttempts = 8

// Registration describes a leased liveness record: a broker's or a storage
// node's.
type Registration struct {
	Key string
	TTL time.Duration
	// Refresh is how often Value is looked at again (0: never), and the
	// shortest time between two rewrites. The record is rewritten only when
	// Value's bytes differ from what was last written: liveness is the lease
	// (keep-alives make no etcd revision), so an idle node writes nothing.
	Refresh time.Duration
	// MaxRefresh, when above Refresh, spaces the rewrites of a record that
	// keeps changing: each rewrite made while the record changed at the
	// previous look too doubles the spacing, up to MaxRefresh, and a look
	// that finds it unchanged brings it back to Refresh. A storage node that
	// takes a hundred replicas over a minute (a thousand such nodes at
	// once, when a cluster is created) then writes its record a few times
	// instead of once per Refresh, which at a 3s TTL was more writes than
	// one etcd applies.
	MaxRefresh time.Duration
	Value      func() []byte
	// Owner inspects a live record found at Key: it names its holder (for
	// the error) and says whether it is this node's own earlier incarnation
	// (same advertised address: a kill -9 and restart within the TTL), which
	// is taken over at once. Any other live holder makes registration fail
	// with ErrHeld. Nil means every existing record belongs to another.
	Owner func(existing []byte) (holder string, ours bool)
	// OnRegistered, when set, runs after each successful (re)registration.
	OnRegistered func()
	// OnHeld, when set, gets the record's create revision after each
	// successful (re)registration: writes that only the holder of this id may
	// make compare on it, so once another process re-created the record (a
	// copy of the data dir that registered after this one's lease lapsed),
	// they fail instead of acting for a node id this process no longer holds.
	OnHeld func(createRev int64)
	// HeldWait is how long a record held by another process is waited on
	// before giving up with ErrHeld; default 1.5 x TTL, so a dead holder's
	// lease has expired by then.
	HeldWait time.Duration
}

// KeepRegistered keeps a leased record at reg.Key until ctx ends. The record
// is created only where absent (or where it is this node's own earlier one),
// never blindly overwritten. A record held by another process is waited on
// for HeldWait (default 1.5 x TTL): a holder that died (a node moved right
// after a crash) loses its lease within its TTL and the record is then
// created; a live holder keeps its lease, and KeepRegistered returns ErrHeld
// naming it: a second process with the same node id must stop. A new session
// and record are made whenever the lease is lost (etcd restarted, a long
// partition), with the same rules, and it retries with back-off while etcd is
// unreachable. On exit it revokes the lease so peers see the node leave at
// once. It returns nil when ctx ends, or an ErrHeld error.
func KeepRegistered(ctx context.Context, store Store, reg Registration, lg *zap.Logger) error {
	lg = lg.With(zap.String("key", reg.Key))
	if reg.HeldWait == 0 {
		reg.HeldWait = reg.TTL * 3 / 2
	}
	bo := backoff.New(100*time.Millisecond, 2*time.Second)
	var heldUntil <-chan time.Time // set while another holder is waited on
	for ctx.Err() == nil {
		s, err := NewSession(ctx, store, reg.TTL)
		if err == nil {
			var c claimed
			for {
				c, err = claim(ctx, store, reg, s.Lease())
				if errors.Is(err, ErrUnavailable) || errors.Is(err, errContended) {
					// etcd did not answer in time (or others kept changing
					// the record): claim again on the same lease while it
					// lives. A claim whose answer was lost but which was
					// applied finds the record on this lease, its own. A
					// new session per failed claim made a grant and a
					// revoke for each: on a loaded etcd, three writes
					// where one had timed out.
					if again, _ := waitOrDone(ctx, nil, s, bo.Next()); again {
						continue
					}
					break
				}
				if !errors.Is(err, ErrHeld) {
					break
				}
				if heldUntil == nil {
					lg.Warn("record held by another process; waiting for its lease to expire", zap.Error(err),
						zap.Duration("wait", reg.HeldWait))
					heldUntil = time.After(reg.HeldWait)
				}
				again, expired := waitOrDone(ctx, heldUntil, s, 200*time.Millisecond)
				if again {
					continue
				}
				if !expired {
					err = errWaitCut // our lease or ctx ended: not a verdict on the holder
				}
				break
			}
			if err == nil {
				lg.Info("registered")
				bo.Reset()
				heldUntil = nil
				// The claim knows the record's create revision: a read of it
				// here, failing on a loaded etcd, left the caller fencing its
				// writes on the lapsed record's, refused until the next
				// registration.
				if reg.OnHeld != nil {
					reg.OnHeld(c.createRev)
				}
				if reg.OnRegistered != nil {
					reg.OnRegistered()
				}
				holdRegistration(ctx, store, s, reg, c.rev, c.value, lg)
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.Close(cctx)
			cancel()
		}
		if errors.Is(err, ErrHeld) {
			return fmt.Errorf("%w, whose lease stayed alive for %s: that process runs; stop it first", err, reg.HeldWait)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			lg.Debug("registration failed", zap.Error(err))
			heldUntil = nil // the holder's lease could not run out while we could not look
		}
		if !bo.Wait(ctx) {
			return nil
		}
	}
	return nil
}

// waitOrDone sleeps d before another claim (again), or reports that the wait
// for the holder is over: expired when its deadline (nil: none) passed,
// neither when ctx ended or our own lease was lost.
func waitOrDone(ctx context.Context, deadline <-chan time.Time, s *Session, d time.Duration) (again, expired bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-s.Done():
		return false, false
	case <-deadline:
		return false, true
	case <-t.C:
		return true, false
	}
}

// Claim writes reg's record under lease where the key is absent, or where
// reg.Owner recognises the live record as this node's own; it returns the
// record's mod revision and the value written, or ErrHeld naming the other
// holder.
func Claim(ctx context.Context, store Store, reg Registration, lease LeaseID) (int64, []byte, error) {
	c, err := claim(ctx, store, reg, lease)
	return c.rev, c.value, err
}

// claimed is what a claim wrote: the record's mod and create revisions and
// its value.
type claimed struct {
	rev, createRev int64
	value          []byte
}

// claim is Claim, and it knows the record's create revision without a read:
// the revision of the txn that created it, or that of the record it took
// over (a put keeps a key's create revision).
func claim(ctx context.Context, store Store, reg Registration, lease LeaseID) (claimed, error) {
	for range claimAttempts {
		v := reg.Value()
		ok, rev, err := store.Txn(ctx, []Cmp{CreateRevIs(reg.Key, 0)}, []Op{OpPut(reg.Key, v, lease)})
		if err != nil {
			return claimed{}, err
		}
		if ok {
			return claimed{rev: rev, createRev: rev, value: v}, nil
		}
		kvp, err := store.Get(ctx, reg.Key)
		if err != nil {
			return claimed{}, err
		}
		if kvp == nil {
			continue // it expired in between: create it again
		}
		holder, ours := "an unknown process", false
		if reg.Owner != nil {
			holder, ours = reg.Owner(kvp.Value)
		}
		if !ours && kvp.Lease != lease {
			return claimed{}, fmt.Errorf("%w: %s is held by %s (lease %x)", ErrHeld, reg.Key, holder, int64(kvp.Lease))
		}
		ok, rev, err = store.Txn(ctx, []Cmp{ModRevIs(reg.Key, kvp.ModRev)}, []Op{OpPut(reg.Key, v, lease)})
		if err != nil {
			return claimed{}, err
		}
		if ok {
			return claimed{rev: rev, createRev: kvp.CreateRev, value: v}, nil
		}
	}
	return claimed{}, fmt.Errorf("%w: %s", errContended, reg.Key)
}

// resumeHeld keeps the session's lease alive again when its keep-alive
// ended while etcd still holds the lease: the record is still there, on
// that lease. The client gives up a TTL after the last answer it read, and a
// loaded etcd or a busy process reads late: the lease may outlive that by
// the answer's delay. Registering again would revoke the lease (deleting
// the record: peers see the node leave and come back, a master moves its
// leaderships) for a node that never stopped. A lease that is gone, or a
// record that is not ours, is not resumed. A read that fails (the same
// loaded etcd, timing out) proves nothing either way: the lease is resumed
// blind, at most maxBlind times in a row (a resumed keep-alive of a lease
// etcd no longer holds ends at its first answer); blind counts them.
func resumeHeld(ctx context.Context, store Store, s *Session, key string, blind *int, lg *zap.Logger) bool {
	if ctx.Err() != nil {
		return false
	}
	kvp, err := store.Get(ctx, key)
	switch {
	case err != nil && *blind >= maxBlind:
		return false
	case err != nil:
		*blind++
	case kvp == nil || kvp.Lease != s.Lease():
		return false
	default:
		*blind = 0
	}
	if err := s.resume(); err != nil {
		lg.Debug("resuming the lease's keep-alive failed", zap.Error(err))
		return false
	}
	lg.Info("registration keep-alive ended while etcd may still hold the lease; resumed", zap.Int("unread", *blind))
	return true
}

// maxBlind bounds the keep-alives resumed in a row without reading the
// record (resumeHeld).
const maxBlind = 3

// holdRegistration rewrites the record when its value changes, until ctx
// ends, the lease is lost, or another writer changed the record (then the
// caller claims it again, which refuses a foreign holder). Rewrites compare
// the mod revision of our last write: never a blind put. last is the value
// the claim wrote.
func holdRegistration(ctx context.Context, store Store, s *Session, reg Registration, rev int64, last []byte, lg *zap.Logger) {
	blind := 0 // keep-alives resumed in a row without reading the record
	// Without Refresh the record is never rewritten nor read back: only the
	// lease is watched (nil channels never fire).
	var tick, verify <-chan time.Time
	gap := reg.Refresh      // the spacing of the next rewrite
	var notBefore time.Time // while the record keeps changing (MaxRefresh)
	if reg.Refresh > 0 {
		t := time.NewTicker(reg.Refresh)
		defer t.Stop()
		// Nothing rewrites an unchanged record, so a record replaced by
		// another writer is found by reading it now and then (a read
		// makes no revision).
		v := time.NewTicker(10 * reg.Refresh)
		defer v.Stop()
		tick, verify = t.C, v.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			if resumeHeld(ctx, store, s, reg.Key, &blind, lg) {
				continue
			}
			lg.Warn("registration lease lost; registering again")
			return
		case <-tick:
		case <-verify:
			kvp, err := store.Get(ctx, reg.Key)
			if err == nil && (kvp == nil || kvp.ModRev != rev) {
				if !ownWrite(kvp, s) {
					lg.Warn("registration record changed by another writer; registering again")
					return
				}
				rev, last = kvp.ModRev, kvp.Value
			}
			continue
		}
		// A burst of changes: looked at (and written) once it has been
		// spaced. The record is not even built before then: building it
		// (a storage node's report of every replica it hosts and follows,
		// compared and encoded) at every tick cost each node of a
		// cluster being filled a look per Refresh for a write per
		// MaxRefresh, O(nodes) a second for the whole placement.
		now := time.Now()
		if now.Before(notBefore) {
			continue
		}
		v := reg.Value()
		if bytes.Equal(v, last) {
			gap = reg.Refresh
			continue
		}
		ok, next, err := store.Txn(ctx, []Cmp{ModRevIs(reg.Key, rev)}, []Op{OpPut(reg.Key, v, s.Lease())})
		switch {
		case err != nil:
			lg.Debug("refresh failed", zap.Error(err)) // the next tick looks again
		case !ok:
			// A rewrite whose answer was lost (a timeout on a loaded etcd)
			// may have been applied: the record is then ours, on our lease,
			// at a revision we never heard of. Registering again would
			// revoke the lease (peers see the node leave and come back, the
			// master moves its leaderships) for a write of our own.
			kvp, err := store.Get(ctx, reg.Key)
			if err != nil {
				continue // the next tick compares again
			}
			if !ownWrite(kvp, s) {
				lg.Warn("registration record changed by another writer; registering again")
				return
			}
			rev, last = kvp.ModRev, kvp.Value
		default:
			rev, last = next, v
			if reg.MaxRefresh > reg.Refresh {
				// Half a tick early: the ticks that look are Refresh apart.
				notBefore = now.Add(gap - reg.Refresh/2)
				gap = min(2*gap, reg.MaxRefresh)
			}
		}
	}
}

// AwaitFree waits until key holds no record of another live process: absent,
// or this node's own by owner. It looks every 200ms for up to wait (a dead
// holder's lease runs out meanwhile) and fails with ErrHeld past it. It
// writes nothing: it is the check a process makes before it serves anything;
// the claim that settles races comes later (Claim).
func AwaitFree(ctx context.Context, store Store, key string, owner func([]byte) (string, bool), wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		kvp, err := store.Get(ctx, key)
		if err != nil {
			return err
		}
		if kvp == nil {
			return nil
		}
		holder, ours := "an unknown process", false
		if owner != nil {
			holder, ours = owner(kvp.Value)
		}
		if ours {
			return nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-deadline.C:
			t.Stop()
			return fmt.Errorf("%w: %s is held by %s (lease %x), whose lease stayed alive for %s: that process runs; stop it first",
				ErrHeld, key, holder, int64(kvp.Lease), wait)
		case <-t.C:
		}
	}
}

// ownWrite: the record read is on the session's lease, so this registration
// wrote it (a lease is one session's own), whatever revision it is at.
func ownWrite(kvp *KeyValue, s *Session) bool {
	return kvp != nil && kvp.Lease == s.Lease()
}
