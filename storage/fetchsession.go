package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"go.uber.org/zap"
)

// fetchWait is how long a batched fetch is parked at the leader when none of
// its shards has anything new, by default, after an answer that brought
// entries: long, so that an idle follower costs each of its leaders one
// request per fetchWait. A session whose polls keep coming back empty parks
// longer, up to idleFetchWait (idleWait). A parked fetch counts as a fetch
// for the leader's in-sync upkeep, so it may outlast the catch-up window; a
// frozen follower is still noticed once its parked fetch ends (after at most
// idleFetchWait, or at the next write, which it never acknowledges, or when
// its lease runs out) and no new one comes.
const fetchWait = 10 * time.Second

// idleFetchWait is the longest a session parks its fetch: a new session's
// first park (nothing has come from the leader yet), and where the parks of
// one whose polls came back empty end up: each empty answer doubles the
// park, from FetchWait, and an answer with entries brings it back. A
// change of members does not: the park only bounds how long a poll waits
// when nothing comes (an append wakes it at once), and while a cluster was
// placed each new database's joins restarted its sessions' parks at
// FetchWait, so at 1,000 simulated nodes ~42,000 sessions of one or two
// shards each polled again every 10-20 s all through placement (a quarter
// to two fifths of its fetches, ending empty). 1,000 idle nodes following
// 64 leaders each sent 6,400 polls a second at 10 s, each waking the
// leader's in-sync upkeep of every shard in it; at 30 s, 1,400 a second
// from ~42,000 sessions. It is the leaders' cap too (maxFetchWait); a
// leader of an earlier version caps a park at 30 s, inside the follower's
// wait for its answer.
const idleFetchWait = maxFetchWait

// idleWait is the park after one that came back empty.
func idleWait(park, base time.Duration) time.Duration {
	return min(2*park, idleCap(base))
}

// idleCap is the longest park of a session whose FetchWait is base.
func idleCap(base time.Duration) time.Duration { return max(base, idleFetchWait) }

// spreadPark is the park a main poll asks for when the session's is park
// (base its FetchWait): the longest park less a random part of up to a
// quarter of it, others as they are. The sessions a placement starts park
// the longest park from their first poll, all within seconds of each
// other: without the spread they came back together every minute, and a
// settled cluster's polls came in waves of all its sessions.
func spreadPark(park, base time.Duration) time.Duration {
	if park < idleCap(base) {
		return park
	}
	return park - rand.N(park/4)
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

// fetchSession pulls, with one long-poll (the main poll), every shard this
// node follows from one leader node, and applies the entries it gets. A shard
// whose answer is anything else (truncate, full sync, an error) is handed
// back to its replica, which deals with it through the per-shard API and
// then joins again.
//
// A shard that joins while the session's poll is parked at the leader is
// pulled by a poll of its own (a side poll) instead of re-sending the
// parked one: while a cluster is placed, a shard joins a session at each
// new database whose leader and follower the session links, and each join
// re-sending the whole poll made a session of k shards cost k²/2 shards
// fetched (at 1,000 simulated nodes, most of the agents' fetch work). A
// side poll is parked until just past the main poll's end, and the next
// main poll folds every side poll back into itself (an answer to a side
// poll, a write, folds them at once).
type fetchSession struct {
	h    *Host
	peer client.Peer     // the leader node: its id is signed into every fetch
	ctx  context.Context // the session's: side polls run under it

	// applyMu is held while an answer is applied: a replica leaving the
	// session waits on it, so nothing is applied to it after it left (it
	// may lead the shard next). A fold takes it too: a member moves to
	// another poll only between answers, so the poll that takes it over
	// reads the replica's log after everything the previous one applied.
	applyMu sync.Mutex
	applied int // under applyMu: barriers passed (keeps the barrier's critical section non-empty)

	mu      sync.Mutex
	members map[*replica]*member
	changed chan struct{} // closed when the main poll must be re-sent: a member left, or side polls fold back
	// mainCancel cancels the main poll in flight; bumpLocked calls it. (A
	// goroutine per poll waiting on changed did, parked as long as the
	// poll: one more parked goroutine per session, ~42,000 at 1,000
	// simulated nodes, each a stack every GC cycle scans.)
	mainCancel context.CancelCauseFunc
	park       time.Duration // the next poll's park (0: FetchWait); see idleFetchWait
	main       *carrier      // the main poll in flight (nil: none, the next one takes every member)
	until      time.Time     // when the main poll in flight ends, unless answered sooner
	cancel     context.CancelFunc
	sides      sync.WaitGroup // the side polls
	done       chan struct{}
}

// log is the session's logger, made when it logs (seldom): a logger with
// fields of its own for each of ~42,000 sessions a 1,000-node placement
// starts was ~0.6 % of the agents' CPU.
func (s *fetchSession) log() *zap.Logger {
	return s.h.lg.With(zap.String("leader", s.peer.ID), zap.String("leader_address", s.peer.Address))
}

// carrier is one poll of a session: the main one, or a side poll.
type carrier struct {
	cancel context.CancelFunc // a side poll's (nil for the main poll: see changed)
}

// member is one followed shard of a session.
type member struct {
	term int64
	back func(why error) // the session hands the shard back to its replica: called once, at most
	on   *carrier        // the poll that pulls it (nil: the next main poll)
}

// sideOutlasts is how much longer than the main poll in flight a side poll
// is parked: the main poll's end folds it back (a side poll that ended first
// would fold the session once more, a re-send of the whole main poll). A side
// poll parks half FetchWait at most, though: a main poll parked longer is
// folded by the first side poll's end; and a side poll holds a goroutine,
// which a replica of a settled cluster should not.
const sideOutlasts = time.Second

// isSide: m is pulled by a side poll (it pulls m alone).
func (m *member) isSide() bool { return m != nil && m.on != nil && m.on.cancel != nil }

// join adds r (following at term) to the session of its leader node p;
// the session calls back when it hands the shard back (never after r left
// with part). back must not block. While the session's main poll is in
// flight, r is pulled by a side poll of its own until the next fold.
func (h *Host) join(r *replica, p client.Peer, term int64, back func(why error)) {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	s := h.sessions[p]
	if s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s = &fetchSession{h: h, peer: p, ctx: ctx, members: map[*replica]*member{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
			park: idleCap(h.cfg.FetchWait)}
		h.sessions[p] = s
		h.sessGen++
		go func() {
			defer close(s.done)
			s.run(ctx)
			s.sides.Wait()
		}()
	}
	m := &member{term: term, back: back}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.members[r]; old.isSide() {
		old.on.cancel() // joined again: its side poll pulled it alone
	}
	s.members[r] = m
	if s.main == nil {
		s.bumpLocked() // the main poll takes it (wakes it when it had no members)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	m.on = &carrier{cancel: cancel}
	park := min(max(time.Until(s.until), 0)+sideOutlasts, s.h.cfg.FetchWait/2)
	s.sides.Add(1)
	go func() {
		defer s.sides.Done()
		defer cancel()
		s.side(ctx, m.on, park)
	}()
}

// errLeaderGone: the session's leader node is no longer live at its
// address; its replicas look their leader up again.
var errLeaderGone = errors.New("storage: the leader node is no longer live at its address")

// endSessionsGone hands every member of the sessions whose leader (id and
// address) is not live in nodes back to its replica (errLeaderGone). It
// looks at the sessions of the nodes that changed since its last look
// (statemachine.Changed), or at all of them when a session was created
// since: at 1,000 simulated nodes in one process, a dead domain's 334
// lease ends woke ~666 hosts each, and a look at every session of every
// host on each was an eighth of the process's CPU while the failover it
// waited for was under way.
func (h *Host) endSessionsGone(nodes statemachine.Map[models.StorageNode]) {
	h.sessMu.Lock()
	gone := h.goneLocked(nodes)
	h.sessMu.Unlock()
	for _, s := range gone {
		s.log().Info("leader address no longer live; its followers look the leader up again")
		s.handBackMembers(errLeaderGone)
	}
}

// goneLocked is endSessionsGone's look, under sessMu: the sessions whose
// leader is not live in nodes, among those of the nodes changed since the
// last look, or among all when a session was created since.
func (h *Host) goneLocked(nodes statemachine.Map[models.StorageNode]) []*fetchSession {
	last := h.goneSeen
	h.goneSeen = goneCheck{nodes: nodes, gen: h.sessGen, ok: true}
	var changed map[string]bool
	if last.ok && last.gen == h.sessGen {
		changed = map[string]bool{}
		statemachine.Changed(last.nodes, nodes, func(id string) { changed[id] = true })
		if len(changed) == 0 {
			return nil
		}
	}
	var gone []*fetchSession
	for p, s := range h.sessions {
		if changed != nil && !changed[p.ID] {
			continue
		}
		if n, ok := nodes.Get(p.ID); !ok || n.NodeAddress != p.Address {
			gone = append(gone, s)
		}
	}
	return gone
}

// goneCheck is what endSessionsGone last looked at: the live nodes, and
// how many sessions had been created.
type goneCheck struct {
	nodes statemachine.Map[models.StorageNode]
	gen   uint64
	ok    bool
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
	if m := s.members[r]; m.isSide() {
		m.on.cancel() // its side poll pulled only r
	} else if m != nil {
		s.bumpLocked() // the main poll is re-sent without r
	}
	delete(s.members, r)
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
	s.handBackAll(reps, mems, nil, err)
}

func (s *fetchSession) bumpLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	if s.mainCancel != nil {
		s.mainCancel(nil) // the main poll in flight is re-sent
		s.mainCancel = nil
	}
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
		s.log().Debug("batched fetch failed", zap.Error(err))
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

// pollOnce sends the main poll: one batched fetch for every member (the
// side polls' folded in, and cancelled), and applies the answer. A change of
// members that is not a join re-sends it at once.
func (s *fetchSession) pollOnce(ctx context.Context) error {
	c := &carrier{}
	s.applyMu.Lock() // a fold: no side poll is applying an answer
	s.mu.Lock()
	park := s.park
	if park == 0 {
		park = s.h.cfg.FetchWait
	}
	wait := spreadPark(park, s.h.cfg.FetchWait)
	reps, mems, folded := s.takeLocked(c, nil)
	changed := s.changed
	if len(reps) > 0 {
		s.main, s.until = c, time.Now().Add(wait)
	}
	s.mu.Unlock()
	s.applyMu.Unlock()
	for _, f := range folded {
		f.cancel()
	}
	if len(reps) == 0 {
		select {
		case <-ctx.Done():
		case <-changed:
		}
		return nil
	}
	pctx, answered, cancel := withAnswerDeadline(ctx, wait)
	defer cancel(nil)
	s.mu.Lock()
	select {
	case <-changed:
		cancel(nil) // changed since the members were taken
	default:
		s.mainCancel = cancel // bumpLocked cancels it
	}
	s.mu.Unlock()
	ans, err := s.fetch(pctx, reps, mems, wait)
	answered()
	s.mu.Lock()
	if s.main == c {
		s.main = nil
	}
	s.mainCancel = nil
	s.mu.Unlock()
	if errors.Is(err, client.ErrUnsupported) {
		s.refused(reps, mems, c, err)
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
	records, err := s.applyAnswer(ans, reps, mems, c)
	s.applyMu.Unlock()
	s.mu.Lock()
	switch {
	case records > 0:
		s.park = 0
	case err == nil:
		s.park = idleWait(park, s.h.cfg.FetchWait) // parked for nothing: park longer
	}
	s.mu.Unlock()
	return err
}

// side is the poll of a shard that joined while the main poll was parked
// (c carries it), parked up to park: a little past the main poll's end,
// which folds it back into the session's next poll. One that ends first (an
// answer, a failure: the main poll counts those) folds the session itself.
// It ends at once when a fold or the shard's leaving cancelled it (ctx).
func (s *fetchSession) side(ctx context.Context, c *carrier, park time.Duration) {
	s.mu.Lock()
	reps, mems, _ := s.takeLocked(nil, c)
	s.mu.Unlock()
	if len(reps) == 0 {
		return
	}
	pctx, answered, cancel := withAnswerDeadline(ctx, park)
	defer cancel(nil)
	ans, err := s.fetch(pctx, reps, mems, park)
	answered()
	if ctx.Err() != nil {
		if err == nil {
			ans.Close()
		}
		return
	}
	switch {
	case errors.Is(err, client.ErrUnsupported):
		s.refused(reps, mems, c, err)
		err = nil
	case err == nil:
		s.applyMu.Lock()
		_, err = s.applyAnswer(ans, reps, mems, c)
		s.applyMu.Unlock()
		ans.Close()
	}
	if err != nil {
		s.log().Debug("batched fetch of a joining shard failed", zap.Error(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fold := false
	for _, m := range s.members {
		if m.on == c {
			m.on, fold = nil, true
		}
	}
	if fold {
		s.bumpLocked()
	}
}

// takeLocked lists the members a poll sends: every member when main is set
// (which then carries them all: it returns the side polls that carried
// some, to be cancelled), else those that side carries.
func (s *fetchSession) takeLocked(main, side *carrier) (reps []*replica, mems []*member, folded []*carrier) {
	reps = make([]*replica, 0, len(s.members))
	mems = make([]*member, 0, len(s.members))
	for r, m := range s.members {
		if main == nil && m.on != side {
			continue
		}
		if main != nil {
			if m.isSide() {
				folded = append(folded, m.on)
			}
			m.on = main
		}
		reps = append(reps, r)
		mems = append(mems, m)
	}
	return reps, mems, folded
}

// fetch sends one batched fetch for reps (mems their members), parked up to
// park at the leader.
func (s *fetchSession) fetch(ctx context.Context, reps []*replica, mems []*member, park time.Duration) (*client.FetchAnswer, error) {
	req := client.FetchRequest{Node: s.h.nodeID, WaitMS: park.Milliseconds(), Shards: make([]client.FetchShard, len(reps))}
	for i, r := range reps {
		req.Shards[i] = client.FetchShard{DB: r.db, Shard: r.shard, Term: mems[i].term}
		r.applyMu.Lock()
		req.Shards[i].After, req.Shards[i].AfterTerm = r.eng.LastEntry()
		r.applyMu.Unlock()
	}
	return s.h.peer().Fetch(ctx, s.peer, req)
}

// refused hands the shards of a poll the leader refused (a leader without
// batched fetches: another version) back: every shard pulls alone from it
// for a while, then tries again (it may have been upgraded meanwhile).
func (s *fetchSession) refused(reps []*replica, mems []*member, c *carrier, err error) {
	s.h.refuseBatch(s.peer.Address)
	s.log().Info("leader has no batched fetch: its shards are pulled one by one", zap.Error(err),
		zap.Duration("retry_in", noBatchFor))
	s.handBackAll(reps, mems, c, fmt.Errorf("%w: %w", errNoBatch, err))
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

// handBackAll hands reps (mems their members) back with err, those still
// pulled by c (any poll: nil).
func (s *fetchSession) handBackAll(reps []*replica, mems []*member, c *carrier, err error) {
	for i, r := range reps {
		s.handBack(r, mems[i], c, err)
	}
}

// carries: r is still in the session as m (not left, not rejoined since),
// pulled by c (any poll: nil).
func (s *fetchSession) carries(r *replica, m *member, c *carrier) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[r] == m && (c == nil || m.on == c)
}

// handBack removes r from the session and tells its replica why, if it is
// still the member m, pulled by c (any poll: nil).
func (s *fetchSession) handBack(r *replica, m *member, c *carrier, err error) {
	s.mu.Lock()
	ok := s.members[r] == m && (c == nil || m.on == c)
	if ok {
		delete(s.members, r)
		if c == nil && m.isSide() {
			m.on.cancel() // handed back from outside its poll: that poll pulled r alone
		}
	}
	s.mu.Unlock()
	if ok {
		m.back(err)
	}
}

// applyAnswer applies each record of a batched fetch answer to the replicas
// still in the session as they were when it was sent and still pulled by c
// (a fold moves them to another poll between answers; a replica whose
// entries fail to apply is handed back, and the rest of its record skipped).
// A record's entries are queued as they are read and share group commits;
// the record is waited for before the next one is read (the next fetch, which
// acknowledges them, must not go out before they are durable). It returns
// how many records the answer had.
func (s *fetchSession) applyAnswer(ans *client.FetchAnswer, reps []*replica, mems []*member, c *carrier) (int, error) {
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
		if !s.carries(r, m, c) {
			apply = errSolo // left or moved meanwhile: Next skips its entries
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
			s.handBack(r, m, c, apply)
		case rec.Status == client.FetchTruncate, rec.Status == client.FetchFullSync:
			s.handBack(r, m, c, errSolo)
		case rec.Status == client.FetchError:
			s.handBack(r, m, c, fmt.Errorf("%w: leader answered %d", errSolo, rec.Arg))
		}
	}
}
