package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/wire"
	"go.uber.org/zap"
)

// follow pulls the leader's log from our last txn id until the role changes.
// The pulls go through the node's batched fetch session with the leader (one
// long-poll for every shard this node follows there); a shard the session
// hands back (its log diverged, it needs a full sync, the leader refused it)
// pulls once alone through the per-shard API, which truncates a diverged
// tail or fully syncs a replica too far behind, and then joins again.
// The leader's address is read from its record when following starts, and
// again after fetching from it failed (it may have restarted elsewhere).
//
// A step of the role (roleRun) runs follow until the replica joins the
// session and returns then: while the session pulls for it, no goroutine of
// its own waits. The session's hand-back (why) starts the next step.
func (r *replica) follow(ctx context.Context, rr *roleRun, d desired, bo *backoff.Backoff, why error) {
	for ctx.Err() == nil {
		if why != nil {
			if !r.pullAlone(ctx, d, bo, why) {
				r.sleep(ctx, bo.Next())
			}
			why = nil
			continue
		}
		if r.h.leaving.Load() {
			// Handing off: a fetch now would put us back in the in-sync set
			// we are leaving, which would then wait for a node about to stop.
			return
		}
		came := r.h.peersCame() // before the look: a return after it closes it
		addr, err := r.h.peerAddress(ctx, d.leader)
		if err != nil {
			r.lg.Debug("leader address unknown", zap.String("leader", d.leader), zap.Error(err))
			if errors.Is(err, ErrPeerNotLive) && came != nil {
				r.awaitLeader(ctx, came)
			} else {
				r.sleep(ctx, bo.Next())
			}
			continue
		}
		d.address = addr
		if r.h.batchRefused(addr) {
			why = errNoBatch
			continue
		}
		joined := d
		r.h.join(r, d.leaderPeer(), d.term, func(why error) {
			rr.goStep(func(ctx context.Context) { r.follow(ctx, rr, joined, bo, why) })
		})
		return
	}
}

// notLiveRecheck bounds a follower's wait for a leader that is not live:
// the live nodes it watches may have shown the leader leave and return at
// the same address in one change, which wakes nobody.
const notLiveRecheck = 5 * time.Second

// awaitLeader waits, for a follower whose leader is not live (its lease
// ended: dead, or cut off), until its role changes (ctx ends: the master
// published a new leader, or this one again), a node becomes live (came:
// the leader may be back), or notLiveRecheck passes. The followers of a
// dead failure domain's leaders used to look the leader up again on a
// back-off from 50 ms, ~8,000 of them at 1,000 simulated nodes: a quarter
// of the process's CPU while the master re-elected their shards.
func (r *replica) awaitLeader(ctx context.Context, came <-chan struct{}) {
	t := time.NewTimer(notLiveRecheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-came:
	case <-t.C:
	}
}

// pullAlone deals with a shard the session handed back (why) after it was
// joined at d.address: false when the next join should back off first.
func (r *replica) pullAlone(ctx context.Context, d desired, bo *backoff.Backoff, why error) bool {
	if errors.Is(why, errLeaderGone) {
		r.h.part(r, d.leaderPeer())
		r.h.forgetPeer(d.leader, d.address)
		return false
	}
	r.lg.Debug("pulling alone", zap.String("leader", d.leader), zap.Error(why))
	var wait time.Duration
	if errors.Is(why, errNoBatch) {
		wait = soloWait
	}
	err := r.pullOnce(ctx, d, wait)
	if err == nil {
		bo.Reset()
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(why, errUnreachable) || errors.Is(err, errNoAnswer) {
		r.h.forgetPeer(d.leader, d.address)
	}
	r.lg.Debug("fetch from leader failed", zap.String("leader", d.leader), zap.Error(err))
	return false
}

// pullOnce pulls the shard's log once, parked up to wait at the leader when
// nothing is new.
func (r *replica) pullOnce(ctx context.Context, d desired, wait time.Duration) error {
	last, lastTerm := r.eng.LastEntry()
	if lastTerm > uint64(d.term) {
		// Raft's rule: never take a log from a leadership older than the
		// newest one ours holds entries of. That leader (a restored state's)
		// would truncate entries that may be acknowledged; wait instead for
		// the master to publish a term above ours (it sees our max_term).
		return fmt.Errorf("%w: leader %s is at term %d, our log holds term %d", ErrStaleTerm, d.leader, d.term, lastTerm)
	}
	lctx, answered, cancel := withAnswerDeadline(ctx, wait)
	defer cancel(nil)
	ans, err := r.h.peer().Log(lctx, r.leaderShard(d), client.LogRequest{Term: d.term, Node: r.h.nodeID, After: last, AfterTerm: lastTerm, Wait: wait})
	answered()
	if err != nil {
		if errors.Is(context.Cause(lctx), errNoAnswer) {
			return fmt.Errorf("%w: %s: %w", errNoAnswer, d.address, err)
		}
		return err
	}
	defer ans.Close()
	switch {
	case ans.FullSync:
		return r.fullSync(ctx, d)
	case ans.Truncate:
		r.applyMu.Lock()
		err = r.eng.TruncateAfter(ans.TruncateTo)
		r.applyMu.Unlock()
		if errors.Is(err, engine.ErrCompacted) {
			return r.fullSync(ctx, d)
		}
		if err == nil {
			r.lg.Info("truncated divergent tail", zap.Uint64("after", ans.TruncateTo), zap.Uint64("was", last))
		}
		return err
	}
	return r.applyLog(ans)
}

// leaderShard addresses this replica's shard on the leader of d.
func (r *replica) leaderShard(d desired) client.Shard {
	return client.Shard{Peer: d.leaderPeer(), DB: r.db, Shard: r.shard}
}

// applyLog applies a log answer's entries in order: they are queued as they
// arrive, committed in groups, and it returns once the last one is durable.
func (r *replica) applyLog(ans *client.LogAnswer) (err error) {
	var wait func() error // of the last entry queued
	defer func() { err = errors.Join(err, waitApplied(wait)) }()
	for {
		e, err := ans.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		next, err := r.append(e)
		if err != nil {
			return err
		}
		wait = next
	}
}

// append queues a leader's entry for the group commit.
func (r *replica) append(e wire.Entry) (func() error, error) {
	if e.TxnID == 0 {
		return nil, fmt.Errorf("apply txn 0: %w", engine.ErrTxnGap)
	}
	var wait func() error
	st, err := r.eng.Stage(engine.Entry{TxnID: e.TxnID, Term: e.Term, Points: e.Points, Delete: e.Delete})
	if err == nil {
		r.applyMu.Lock()
		_, wait, err = r.eng.Enqueue(st)
		r.applyMu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("apply txn %d: %w", e.TxnID, err)
	}
	return func() error {
		if err := wait(); err != nil {
			return fmt.Errorf("apply txn %d: %w", e.TxnID, err)
		}
		return nil
	}, nil
}

// waitApplied waits for the last entry queued (nil: none was); a failed
// commit fails every entry queued after it, so the last one's answer covers
// them all.
func waitApplied(wait func() error) error {
	if wait == nil {
		return nil
	}
	return wait()
}

// fullSync replaces the local replica with the leader's snapshot.
func (r *replica) fullSync(ctx context.Context, d desired) error {
	snap, err := r.h.peer().Snapshot(ctx, r.leaderShard(d), d.term)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer snap.Close()
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if err := r.eng.Restore(snap); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.lg.Info("full sync from leader done", zap.String("leader", d.leader), zap.Uint64("last_txn_id", r.eng.LastTxnID()))
	return nil
}

// peer is the client of other storage nodes' internal API, over the node's
// peer transport: every node-to-node request goes through it.
func (h *Host) peer() *client.Client { return client.New(h.client) }
