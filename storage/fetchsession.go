package storage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// fetchWait is how long a batched fetch is parked at the leader when none of
// its shards has anything new, by default: long, so that an idle follower
// costs each of its leaders one request per fetchWait. A parked fetch counts
// as a fetch for the leader's in-sync upkeep, so it may outlast the catch-up
// window; a frozen follower is still noticed once its parked fetch ends
// (after at most this long, or at the next write, which it never
// acknowledges) and no new one comes.
const fetchWait = 20 * time.Second

// fetchSession pulls, with one long-poll at a time, every shard this node
// follows from one leader node, and applies the entries it gets. A shard
// whose answer is anything else (truncate, full sync, an error) is handed
// back to its replica, which deals with it through the per-shard API and
// then joins again.
type fetchSession struct {
	h       *Host
	address string
	lg      *zap.Logger

	// applyMu is held while an answer is applied: a replica leaving the
	// session waits on it, so nothing is applied to it after it left (it
	// may lead the shard next).
	applyMu sync.Mutex
	applied int // under applyMu: barriers passed (keeps the barrier's critical section non-empty)

	mu      sync.Mutex
	members map[*replica]*member
	changed chan struct{} // closed when members change: the parked poll is re-sent
	cancel  context.CancelFunc
	done    chan struct{}
}

// member is one followed shard of a session.
type member struct {
	term int64
	solo chan error // the session hands the shard back to its replica (buffered)
}

// join adds r (following at term) to the session of its leader's address and
// returns the channel on which the session hands it back.
func (h *Host) join(r *replica, address string, term int64) <-chan error {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	s := h.sessions[address]
	if s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s = &fetchSession{h: h, address: address, lg: h.lg.With(zap.String("leader_address", address)),
			members: map[*replica]*member{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
		h.sessions[address] = s
		go func() { defer close(s.done); s.run(ctx) }()
	}
	m := &member{term: term, solo: make(chan error, 1)}
	s.mu.Lock()
	s.members[r] = m
	s.bumpLocked()
	s.mu.Unlock()
	return m.solo
}

// part removes r from its session; the last member's leaving ends the session.
func (h *Host) part(r *replica, address string) {
	h.sessMu.Lock()
	s := h.sessions[address]
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
		delete(h.sessions, address)
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

func (s *fetchSession) bumpLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
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
			s.mu.Lock()
			reps := make([]*replica, 0, len(s.members))
			mems := make([]*member, 0, len(s.members))
			for r, m := range s.members {
				reps, mems = append(reps, r), append(mems, m)
			}
			s.mu.Unlock()
			s.handBackAll(reps, mems, fmt.Errorf("%w: %w", errUnreachable, err))
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
	req := fetchRequest{Node: s.h.nodeID, WaitMS: s.h.cfg.FetchWait.Milliseconds(), Shards: make([]fetchShard, 0, len(s.members))}
	for r, m := range s.members {
		reps = append(reps, r)
		mems = append(mems, m)
		req.Shards = append(req.Shards, fetchShard{DB: r.db, Shard: r.shard, Term: m.term})
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
		req.Shards[i].After, req.Shards[i].AfterTerm = r.eng.LastTxnID(), r.eng.LastTerm()
		r.applyMu.Unlock()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-pctx.Done():
		}
	}()
	resp, err := s.h.send(pctx, http.MethodPost, fmt.Sprintf("http://%s/internal/v1/fetch", s.address), bytes.NewReader(body))
	if err != nil {
		if errors.Is(pctx.Err(), context.Canceled) && ctx.Err() == nil {
			return nil // members changed: poll again with them
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusNotFound {
			// A leader without batched fetches: every shard pulls alone.
			s.handBackAll(reps, mems, fmt.Errorf("%w: leader has no batched fetch", errSolo))
			return nil
		}
		return fmt.Errorf("leader answered %d: %s", resp.StatusCode, msg)
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.applyAnswer(bufio.NewReaderSize(resp.Body, 64<<10), reps, mems)
}

// errSolo: the session handed a shard back to its replica.
var errSolo = errors.New("storage: shard handed back to its own pull")

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
		m.solo <- err
	}
}

// applyAnswer applies each record of a batched fetch answer to the replicas
// still in the session as they were when it was sent. Call with applyMu held.
func (s *fetchSession) applyAnswer(br *bufio.Reader, reps []*replica, mems []*member) error {
	for {
		idx, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var hdr [3]uint64
		for i := range hdr {
			if hdr[i], err = binary.ReadUvarint(br); err != nil {
				return err
			}
		}
		status, arg, count := hdr[0], hdr[1], hdr[2]
		if idx >= uint64(len(reps)) || count > 1<<20 {
			return fmt.Errorf("%w: batched fetch record for shard %d of %d", ErrBadAnswer, idx, len(reps))
		}
		r, m := reps[idx], mems[idx]
		var apply error
		if !s.isMember(r, m) {
			apply = errSolo // left meanwhile: read past its entries
		}
		for range count {
			n, err := binary.ReadUvarint(br)
			if err != nil {
				return err
			}
			if n > 256<<20 {
				return fmt.Errorf("%w: entry of %d bytes", ErrBadAnswer, n)
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(br, buf); err != nil {
				return err
			}
			if apply != nil {
				continue
			}
			var e engine.Entry
			if apply = e.UnmarshalBinary(buf); apply == nil {
				r.applyMu.Lock()
				apply = r.eng.Apply(e)
				r.applyMu.Unlock()
				if apply != nil {
					apply = fmt.Errorf("apply txn %d: %w", e.TxnID, apply)
				}
			}
		}
		switch {
		case apply != nil:
			s.handBack(r, m, apply)
		case status == fetchTruncate, status == fetchFullSync:
			s.handBack(r, m, errSolo)
		case status == fetchError:
			s.handBack(r, m, fmt.Errorf("%w: leader answered %d", errSolo, arg))
		}
	}
}
