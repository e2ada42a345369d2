package storage

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
)

// In-sync set writes of one host's leaders go to etcd together when they
// come at the same time (a group commit): when a node dies, every live
// leader of a shard it followed drops it at its next upkeep, 21,000 shards
// at once when a third of 1,000 nodes goes, each a read and a txn of its
// own. A write that finds another batch in flight waits for it and goes
// with the next one: one read of every key the batch needs and one txn of
// every write's compares and put. Nothing waits that would not have: the
// first write of an idle host goes at once, alone. Each write is fenced
// exactly as alone (prepareISR); a refused batch is written again one by
// one (persistISR), so a write refused on its own compares fails alone.

// maxISRBatch bounds the writes of one batch: each has a put and up to
// three compares (two shared by writes of one database and one node),
// within etcd's operations per txn (128 by default).
const maxISRBatch = 32

// isrBatchTimeout bounds one batch's read and txn. A batch is written for
// every caller queued in it, so it runs under none of their contexts (one
// role ending must not fail the others' writes) but under this bound.
const isrBatchTimeout = 10 * time.Second

// isrWriteReq is one leader's in-sync set write waiting for its batch.
type isrWriteReq struct {
	ctx  context.Context // its caller's: a write whose caller is gone is not sent
	r    *replica
	term int64
	isr  []string
	// first, when set, is a new leadership's first write: its set is
	// computed from what the batch read (initialFrom), into isr.
	first *desired
	err   error
	done  chan struct{}
	// turn is closed when the caller writing the batches hands its turn
	// to this write's caller (its own write decided, others still queued).
	turn  chan struct{}
	given bool // turn closed (under the batcher's lock)
}

// isrBatcher queues a host's in-sync set writes while a batch is in flight.
type isrBatcher struct {
	mu      sync.Mutex
	pending []*isrWriteReq
	busy    bool // a caller is writing batches (or was just handed the turn)
}

// persistISRBatched is persistISR (reading first) through the host's
// batcher. The caller that finds no batch in flight writes batches until
// its own is decided and hands the turn on; the others wait for theirs.
func (r *replica) persistISRBatched(ctx context.Context, term int64, isr []string) error {
	return r.h.isrBatch.write(newISRWrite(ctx, r, term, isr, nil))
}

// persistFirstISR writes a new leadership's first set (initialISR's)
// through the host's batcher, and returns it.
func (r *replica) persistFirstISR(ctx context.Context, d desired) ([]string, error) {
	w := newISRWrite(ctx, r, d.term, nil, &d)
	if err := r.h.isrBatch.write(w); err != nil {
		return nil, err
	}
	return w.isr, nil
}

func newISRWrite(ctx context.Context, r *replica, term int64, isr []string, first *desired) *isrWriteReq {
	return &isrWriteReq{ctx: ctx, r: r, term: term, isr: isr, first: first, done: make(chan struct{}), turn: make(chan struct{})}
}

// write queues w and waits for its outcome. The caller that finds no batch
// in flight writes batches, each under its own bound and none of the
// callers' contexts (one role ending must not fail the writes of others
// queued with it), until its own write is decided; then it hands the turn
// to the next queued caller and returns. A caller whose context ends while
// its write is still queued takes it out and returns at once; one whose
// write is in flight waits for that one batch.
//
// A role's end waits for its steps, and a host changes its replicas' roles
// one after the other: when the caller writing the batches also wrote every
// batch queued behind its own, or a queued caller waited for the queue to
// reach its cancelled write, one leadership's end waited for all of the
// host's queued writes (tens of batches when a domain dies, each up to
// isrBatchTimeout on a loaded etcd), and the host's other shards did not
// take their new roles meanwhile: at 300 nodes a domain's new leaders took
// over two minutes to write their first sets.
func (b *isrBatcher) write(w *isrWriteReq) error {
	b.mu.Lock()
	b.pending = append(b.pending, w)
	writer := !b.busy
	b.busy = true
	b.mu.Unlock()
	if !writer {
		select {
		case <-w.done:
			return w.err
		case <-w.turn:
		case <-w.ctx.Done():
			if b.withdraw(w) {
				return w.err
			}
			select {
			case <-w.done:
				return w.err
			case <-w.turn:
			}
		}
	}
	for {
		select {
		case <-w.done:
			b.handOff()
			return w.err
		default:
		}
		batch := b.take()
		if len(batch) == 0 {
			continue // its own write was taken out: decided
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), isrBatchTimeout)
		w.r.h.writeISRs(ctx, batch)
		cancel()
	}
}

// withdraw takes w, whose caller is gone, out of the queue: true when it
// was still queued (it is then decided, with its caller's error); false
// when it is in flight or its caller was just handed the turn.
func (b *isrBatcher) withdraw(w *isrWriteReq) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.given {
		return false
	}
	i := slices.Index(b.pending, w)
	if i < 0 {
		return false
	}
	b.pending = slices.Delete(b.pending, i, i+1)
	w.err = w.ctx.Err()
	close(w.done)
	return true
}

// handOff ends the calling writer's turn: the first queued write whose
// caller is still there gets it (its caller writes the next batches), else
// nobody is writing any more.
func (b *isrBatcher) handOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.pending) > 0 {
		next := b.pending[0]
		if err := next.ctx.Err(); err != nil {
			next.err = err
			close(next.done)
			b.pending = b.pending[1:]
			continue
		}
		next.given = true
		close(next.turn)
		return
	}
	b.pending = nil
	b.busy = false
}

// take removes the next batch from the queue: at most maxISRBatch writes,
// one per in-sync key (a second write of the same shard, a leave beside an
// upkeep, waits for the next). A queued write whose caller is gone is
// decided with its caller's error, not sent.
func (b *isrBatcher) take() []*isrWriteReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch, rest []*isrWriteReq
	seen := map[*replica]bool{}
	for _, w := range b.pending {
		if err := w.ctx.Err(); err != nil {
			w.err = err // its caller is gone (its role ended): not sent
			close(w.done)
			continue
		}
		if len(batch) < maxISRBatch && !seen[w.r] {
			seen[w.r] = true
			batch = append(batch, w)
		} else {
			rest = append(rest, w)
		}
	}
	b.pending = rest
	return batch
}

// writeISRs writes a batch: alone when it is one write or the store cannot
// read several keys at once; else one read, one txn, and one by one again
// if the txn is refused.
func (h *Host) writeISRs(ctx context.Context, batch []*isrWriteReq) {
	finish := func(w *isrWriteReq, err error) {
		w.err = err
		close(w.done)
	}
	g, multi := h.store.(multiGetter)
	if len(batch) == 1 || !multi {
		for _, w := range batch {
			finish(w, w.alone(ctx))
		}
		return
	}
	rds, err := h.readISRs(ctx, g, batch)
	if err != nil {
		for _, w := range batch {
			finish(w, err)
		}
		return
	}
	var cmps []kv.Cmp
	var ops []kv.Op
	var sent []*isrWriteReq
	type cmpKey struct {
		kind kv.CmpKind
		key  string
		rev  int64
	}
	have := map[cmpKey]bool{} // prepareISR compares revisions only
	for i, w := range batch {
		if w.first != nil {
			if w.isr, err = w.r.initialFrom(*w.first, rds[i]); err != nil {
				finish(w, err)
				continue
			}
		}
		t, err := w.r.prepareISR(w.term, w.isr, rds[i])
		if err != nil || t == nil {
			finish(w, err)
			continue
		}
		for _, c := range t.cmps {
			if k := (cmpKey{c.Kind, c.Key, c.Rev}); !have[k] {
				have[k] = true
				cmps = append(cmps, c)
			}
		}
		ops = append(ops, t.put)
		sent = append(sent, w)
	}
	if len(sent) == 0 {
		return
	}
	ok, rev, err := h.store.Txn(ctx, cmps, ops)
	switch {
	case err != nil:
		for _, w := range sent {
			finish(w, err)
		}
	case ok:
		for _, w := range sent {
			w.r.wroteISR(w.term, rev)
			finish(w, nil)
		}
	default:
		// Some write's compares failed: each is tried alone, on what it
		// reads now, so only those fail.
		for _, w := range sent {
			finish(w, w.alone(ctx))
		}
	}
}

// alone writes w on its own, on what it reads now (a first write's set
// computed again from that read).
func (w *isrWriteReq) alone(ctx context.Context) error {
	if w.first == nil {
		return w.r.persistISR(ctx, w.term, w.isr, nil)
	}
	initial, rd, err := w.r.initialISR(ctx, *w.first)
	if err != nil {
		return err
	}
	w.isr = initial
	return w.r.persistISR(ctx, w.term, initial, rd)
}

// readISRs reads what each write of batch needs (readISR) in one round trip,
// each key once.
func (h *Host) readISRs(ctx context.Context, g multiGetter, batch []*isrWriteReq) ([]*isrReads, error) {
	idx := map[string]int{}
	var keys []string
	key := func(k string) int {
		i, ok := idx[k]
		if !ok {
			i = len(keys)
			idx[k] = i
			keys = append(keys, k)
		}
		return i
	}
	at := make([]isrKeys, len(batch))
	for i, w := range batch {
		at[i] = h.isrKeysOf(w.r, key)
		if w.first != nil {
			at[i].addPeers(w.r.initialPeers(*w.first), func(p string) int { return key(h.ck.Node(p)) })
		}
	}
	vals, cid, err := g.GetMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(keys) {
		return nil, errShortRead(len(vals), len(keys))
	}
	out := make([]*isrReads, len(batch))
	for i := range at {
		out[i] = at[i].reads(vals, cid)
	}
	return out, nil
}
