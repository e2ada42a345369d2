package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"go.uber.org/zap"
)

// fetchWait is how long a batched fetch is parked at the leader when none of
// its shards has anything new, by default: long, so that an idle follower
// costs each of its leaders one request per fetchWait. A session whose polls
// keep coming back empty parks longer, up to idleFetchWait (idleWait). A
// parked fetch counts as a fetch for the leader's in-sync upkeep, so it may
// outlast the catch-up window; a frozen follower is still noticed once its
// parked fetch ends (after at most idleFetchWait, or at the next write, which
// it never acknowledges, or when its lease runs out) and no new one comes.
const fetchWait = 10 * time.Second

// idleFetchWait is the longest a session parks its fetch once its polls
// came back empty: each empty answer doubles the park, from FetchWait, and
// any answer with something in it or a change of members brings it back.
// 1,000 idle nodes following 64 leaders each sent 6,400 polls a second at
// 10 s, each waking the leader's in-sync upkeep of every shard in it. It is
// the leaders' cap too (maxFetchWait).
const idleFetchWait = maxFetchWait

// idleWait is the park after one that came back empty.
func idleWait(park, base time.Duration) time.Duration {
	return min(2*park, max(base, idleFetchWait))
}

// answerGrace is how much longer than its park time a fetch waits for the
// leader's answer to begin (its headers; the body streams after): a leader
// that stopped (kill -STOP, a frozen host) holds the connection open without
// answering, and a fetch that never ends would keep its follower on a dead
// address for ever (a host without the live nodes' watch has no other way to
// notice).
const answerGrace = 3 * time.Second

// errNoAnswer: the leader did not begin its answer in time.
var errNoAnswer = errors.New("storage: leader did not answer in time")

// withAnswerDeadline returns a context cancelled (cause errNoAnswer) unless
// the returned stop is called within park+answerGrace: call it once the
// answer's headers are in.
func withAnswerDeadline(ctx context.Context, park time.Duration) (context.Context, func(), context.CancelCauseFunc) {
	actx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(park+answerGrace, func() { cancel(errNoAnswer) })
	return actx, func() { t.Stop() }, cancel
}

// fetchSession pulls, with one long-poll at a time, every shard this node
// follows from one leader node, and applies the entries it gets. A shard
// whose answer is anything else (truncate, full sync, an error) is handed
// back to its replica, which deals with it through the per-shard API and
// then joins again.
type fetchSession struct {
	h    *Host
	peer client.Peer // the leader node: its id is signed into every fetch
	lg   *zap.Logger

	// applyMu is held while an answer is applied: a replica leaving the
	// session waits on it, so nothing is applied to it after it left (it
	// may lead the shard next).
	applyMu sync.Mutex
	applied int // under applyMu: barriers passed (keeps the barrier's critical section non-empty)

	mu      sync.Mutex
	members map[*replica]*member
	changed chan struct{} // closed when members change: the parked poll is re-sent
	park    time.Duration // the next poll's park (0: FetchWait); see idleWait
	cancel  context.CancelFunc
	done    chan struct{}
}

// member is one followed shard of a session.
type member struct {
	term int64
	back func(why error) // the session hands the shard back to its replica: called once, at most
}

// join adds r (following at term) to the session of its leader node p;
// the session calls back when it hands the shard back (never after r left
// with part). back must not block.
func (h *Host) join(r *replica, p client.Peer, term int64, back func(why error)) {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	s := h.sessions[p]
	if s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s = &fetchSession{h: h, peer: p, lg: h.lg.With(zap.String("leader", p.ID), zap.String("leader_address", p.Address)),
			members: map[*replica]*member{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
		h.sessions[p] = s
		go func() { defer close(s.done); s.run(ctx) }()
	}
	m := &member{term: term, back: back}
	s.mu.Lock()
	s.members[r] = m
	s.bumpLocked()
	s.mu.Unlock()
}

// errLeaderGone: the session's leader node is no longer live at its
// address; its replicas look their leader up again.
var errLeaderGone = errors.New("storage: the leader node is no longer live at its address")

// endSessionsGone hands every member of the sessions whose leader (id and
// address) is not live in nodes back to its replica (errLeaderGone).
func (h *Host) endSessionsGone(nodes statemachine.Map[models.StorageNode]) {
	var gone []*fetchSession
	h.sessMu.Lock()
	for p, s := range h.sessions {
		if n, ok := nodes.Get(p.ID); !ok || n.NodeAddress != p.Address {
			gone = append(gone, s)
		}
	}
	h.sessMu.Unlock()
	for _, s := range gone {
		s.lg.Info("leader address no longer live; its followers look the leader up again")
		s.handBackMembers(errLeaderGone)
	}
}

// partAll removes r from every session it is in (see part).
func (h *Host) partAll(r *replica) {
	var peers []client.Peer
	h.sessMu.Lock()
	for p, s := range h.sessions {
		s.mu.Lock()
		if _, ok := s.members[r]; ok {
			peers = append(peers, p)
		}
		s.mu.Unlock()
	}
	h.sessMu.Unlock()
	for _, p := range peers {
		h.part(r, p)
	}
}

// part removes r from its session; the last member's leaving ends the session.
func (h *Host) part(r *replica, p client.Peer) {
	h.sessMu.Lock()
	s := h.sessions[p]
	if s == nil {
		h.sessMu.Unlock()
		return
	}
	s.mu.Lock()
	delete(s.members, r)
	s.bumpLocked()
	empty := len(s.members) == 0
	s.mu.Unlock()
	if empty {
		delete(h.sessions, p)
	}
	h.sessMu.Unlock()
	if empty {
		s.cancel()
		<-s.done
		return
	}
	// A barrier: an answer being applied is finished, and the next one sees
	// r gone.
	s.applyMu.Lock()
	s.applied++
	s.applyMu.Unlock()
}

// handBackMembers hands every shard of the session back to its replica
// (handBackAll), with err.
func (s *fetchSession) handBackMembers(err error) {
	s.mu.Lock()
	reps := make([]*replica, 0, len(s.members))
	mems := make([]*member, 0, len(s.members))
	for r, m := range s.members {
		reps, mems = append(reps, r), append(mems, m)
	}
	s.mu.Unlock()
	s.handBackAll(reps, mems, err)
}

func (s *fetchSession) bumpLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.park = 0
}

// run polls until the session ends.
// After unreachableAfter failed polls in a row it hands every shard back
// (errUnreachable): its replicas read the leader's address again.
func (s *fetchSession) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	failed := 0
	for ctx.Err() == nil {
		err := s.pollOnce(ctx)
		if err == nil || ctx.Err() != nil {
			backoff, failed = 50*time.Millisecond, 0
			continue
		}
		s.lg.Debug("batched fetch failed", zap.Error(err))
		if failed++; failed >= unreachableAfter {
			failed = 0
			s.handBackMembers(fmt.Errorf("%w: %w", errUnreachable, err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(backoff*2, time.Second)
	}
}

// pollOnce sends one batched fetch for the current members and applies the
// answer. A change of members re-sends it at once.
func (s *fetchSession) pollOnce(ctx context.Context) error {
	s.mu.Lock()
	reps := make([]*replica, 0, len(s.members))
	mems := make([]*member, 0, len(s.members))
	park := s.park
	if park == 0 {
		park = s.h.cfg.FetchWait
	}
	req := client.FetchRequest{Node: s.h.nodeID, WaitMS: park.Milliseconds(), Shards: make([]client.FetchShard, 0, len(s.members))}
	for r, m := range s.members {
		reps = append(reps, r)
		mems = append(mems, m)
		req.Shards = append(req.Shards, client.FetchShard{DB: r.db, Shard: r.shard, Term: m.term})
	}
	changed := s.changed
	s.mu.Unlock()
	if len(reps) == 0 {
		select {
		case <-ctx.Done():
		case <-changed:
		}
		return nil
	}
	for i, r := range reps {
		r.applyMu.Lock()
		req.Shards[i].After, req.Shards[i].AfterTerm = r.eng.LastEntry()
		r.applyMu.Unlock()
	}
	pctx, answered, cancel := withAnswerDeadline(ctx, park)
	defer cancel(nil)
	go func() {
		select {
		case <-changed:
			cancel(nil)
		case <-pctx.Done():
		}
	}()
	ans, err := s.h.peer().Fetch(pctx, s.peer, req)
	answered()
	if errors.Is(err, client.ErrUnsupported) {
		// A leader without batched fetches (another version): every shard
		// pulls alone from it for a while, then tries again (it may have
		// been upgraded meanwhile).
		s.h.refuseBatch(s.peer.Address)
		s.lg.Info("leader has no batched fetch: its shards are pulled one by one", zap.Error(err),
			zap.Duration("retry_in", noBatchFor))
		s.handBackAll(reps, mems, fmt.Errorf("%w: %w", errNoBatch, err))
		return nil
	}
	if err != nil {
		if cause := context.Cause(pctx); errors.Is(cause, errNoAnswer) {
			return fmt.Errorf("%w: %s", errNoAnswer, s.peer)
		}
		if errors.Is(pctx.Err(), context.Canceled) && ctx.Err() == nil {
			return nil // members changed: poll again with them
		}
		return err
	}
	defer ans.Close()
	s.applyMu.Lock()
	records, err := s.applyAnswer(ans, reps, mems)
	s.applyMu.Unlock()
	s.mu.Lock()
	if s.changed == changed { // else members changed meanwhile, which reset the park
		s.park = 0
		if records == 0 && err == nil {
			s.park = idleWait(park, s.h.cfg.FetchWait) // parked for nothing: park longer
		}
	}
	s.mu.Unlock()
	return err
}

// errSolo: the session handed a shard back to its replica.
var errSolo = errors.New("storage: shard handed back to its own pull")

// errNoBatch: the leader's node refused the batched fetch (a node of
// another version); its followers pull per shard, parked at the leader
// (soloWait) as a batched fetch would be.
var errNoBatch = fmt.Errorf("%w: leader has no batched fetch", errSolo)

// noBatchFor is how long followers of a leader that refused the batched
// fetch pull per shard before they try it again.
const noBatchFor = time.Minute

// soloWait is how long a per-shard pull from a leader without batched
// fetches stays parked there when nothing is new: well inside the
// leader's catch-up window (a parked per-shard pull does not count as
// fetching, a batched one does), so an idle follower stays in sync.
const soloWait = 500 * time.Millisecond

// refuseBatch remembers that address refused the batched fetch.
func (h *Host) refuseBatch(address string) {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	h.noBatch[address] = time.Now().Add(noBatchFor)
}

// batchRefused says whether address refused the batched fetch lately.
func (h *Host) batchRefused(address string) bool {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	until, ok := h.noBatch[address]
	if ok && time.Now().After(until) {
		delete(h.noBatch, address)
		return false
	}
	return ok
}

// errUnreachable: the leader's address did not answer several polls in a row.
var errUnreachable = errors.New("storage: leader address unreachable")

// unreachableAfter is how many failed polls in a row make a session hand its
// shards back (errUnreachable).
const unreachableAfter = 3

func (s *fetchSession) handBackAll(reps []*replica, mems []*member, err error) {
	for i, r := range reps {
		s.handBack(r, mems[i], err)
	}
}

// isMember: r is still in the session as m (not left, not rejoined since).
func (s *fetchSession) isMember(r *replica, m *member) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[r] == m
}

// handBack removes r from the session and tells its replica why, if it is
// still the member m.
func (s *fetchSession) handBack(r *replica, m *member, err error) {
	s.mu.Lock()
	ok := s.members[r] == m
	if ok {
		delete(s.members, r)
	}
	s.mu.Unlock()
	if ok {
		m.back(err)
	}
}

// applyAnswer applies each record of a batched fetch answer to the replicas
// still in the session as they were when it was sent (a replica whose
// entries fail to apply is handed back, and the rest of its record skipped).
// A record's entries are queued as they are read and share group commits;
// the record is waited for before the next one is read (the next fetch, which
// acknowledges them, must not go out before they are durable). It returns
// how many records the answer had.
func (s *fetchSession) applyAnswer(ans *client.FetchAnswer, reps []*replica, mems []*member) (int, error) {
	for n := 0; ; n++ {
		rec, err := ans.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		r, m := reps[rec.Index], mems[rec.Index]
		var apply error
		var wait func() error // of the last entry queued for r
		if !s.isMember(r, m) {
			apply = errSolo // left meanwhile: Next skips its entries
		}
		for i := 0; i < rec.Count && apply == nil; i++ {
			e, err := ans.Entry()
			if err != nil && !errors.Is(err, client.ErrBadEntry) {
				return n, errors.Join(err, waitApplied(wait))
			}
			if apply = err; apply == nil {
				var next func() error
				if next, apply = r.append(e); apply == nil {
					wait = next
				}
			}
		}
		// The record's entries share group commits; the next fetch must not
		// go out before they are durable (it acknowledges them).
		if err := waitApplied(wait); err != nil && apply == nil {
			apply = err
		}
		switch {
		case apply != nil:
			s.handBack(r, m, apply)
		case rec.Status == client.FetchTruncate, rec.Status == client.FetchFullSync:
			s.handBack(r, m, errSolo)
		case rec.Status == client.FetchError:
			s.handBack(r, m, fmt.Errorf("%w: leader answered %d", errSolo, rec.Arg))
		}
	}
}
