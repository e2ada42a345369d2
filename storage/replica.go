package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/internal/verify"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"go.uber.org/zap"
)

// Errors of the replication protocol.
var (
	// ErrStaleTerm: the request's term is not this replica's leadership term.
	ErrStaleTerm = fmt.Errorf("storage: %w", models.ErrStaleTerm)
	// ErrNotHosted: this node holds no replica of the shard.
	ErrNotHosted = fmt.Errorf("storage: %w", models.ErrNotHosted)
	// ErrNotEnoughISR: fewer in-sync replicas than the configured minimum.
	ErrNotEnoughISR = fmt.Errorf("storage: %w", models.ErrNotEnoughISR)
	// ErrAckTimeout: the in-sync replicas did not confirm in time.
	ErrAckTimeout = fmt.Errorf("storage: %w", models.ErrAckTimeout)
	// ErrFenced: a follower holds entries of this replica's own leadership
	// term that its log lacks. Only the leader of a term writes that term's
	// entries, so another process led this term under this node id (a copy
	// of the data dir) or this log lost entries; either way the follower's
	// may be acknowledged. The replica stops writing and changing the in-sync
	// set, and never truncates them, until its term or role changes.
	// It answers as a stale term: the leadership is not valid.
	ErrFenced = fmt.Errorf("storage: leadership fenced, a follower holds entries of this term that this replica lacks: %w", models.ErrStaleTerm)
)

type role int

const (
	roleIdle role = iota // assigned, but no leader published (offline)
	roleLeader
	roleFollower
)

// desired is what the published state says this replica should be.
type desired struct {
	role     role
	term     int64
	leader   string // leader node id (followers)
	address  string // leader address (followers)
	replicas []string
}

// leaderPeer is the leader node a follower pulls from.
func (d desired) leaderPeer() client.Peer { return client.Peer{ID: d.leader, Address: d.address} }

// replica is one shard replica on this node.
type replica struct {
	h     *Host
	db    string
	shard int
	id    string // "db/shard"
	uid   string // the database incarnation the replica was opened for
	eng   engine.Shard
	lg    *zap.Logger

	applyMu sync.Mutex // serialises Apply, TruncateAfter and Restore

	mu    sync.Mutex
	want  desired
	since time.Time // when want last changed role or term
	run   *roleRun  // the current role's work; nil when idle or stopped
	// ls is what only a leadership keeps; replaced whole (newLeaderState)
	// on every change of role or term, so nothing of one leadership leaks
	// into the next.
	ls leaderState
	// changed is closed on every append, ack or in-sync set change, and
	// made again when next asked for (changedLocked); nil until then.
	changed chan struct{}

	refused int64 // reconcile only: the term last refused (ErrTermBehind), -1 unreadable, to log once

	watchers atomic.Int32 // batched fetches parked on this replica (Host.watch)
}

// leaderState is a replica's state of one leadership term. A follower's is
// empty (newLeaderState at its role change) and unused.
type leaderState struct {
	isr []string // the in-sync set, as persisted
	// joining are followers caught up but missing acknowledged entries:
	// acknowledgements wait for them too, they join isr once they hold
	// every one (see decideISR).
	joining []string
	// committed is the highest txn id acknowledged to a writer in this
	// leadership, or the log's last when it began if higher.
	committed uint64
	acked     map[string]uint64    // highest txn each follower confirmed
	caught    map[string]time.Time // when each follower last had everything we had when it last fetched
	sentEnd   map[string]uint64    // our last txn when each follower last fetched
	fetched   map[string]time.Time // when each follower last fetched
	parked    map[string]int       // batched fetches of each follower parked here now
	isrTerm   int64                // the term of isrRev
	isrRev    int64                // mod revision of the in-sync set this leader last wrote
	fenced    bool                 // see ErrFenced
	// superseded is a newer term a peer named while this replica led
	// (ErrSuperseded); 0 when none.
	superseded int64
	// retry spaces the upkeeps after in-sync set writes that failed (nil
	// after a success, or when nothing is to be written); wait is the next
	// upkeep's delay it drew (0: none).
	retry *backoff.Backoff
	wait  time.Duration
}

// newLeaderState is the state a leadership starts from: no in-sync set
// yet, and everything in the log (last) counted as acknowledged, since an
// earlier leader may have acknowledged it.
func newLeaderState(last uint64) leaderState {
	return leaderState{committed: last, acked: map[string]uint64{}, caught: map[string]time.Time{},
		sentEnd: map[string]uint64{}, fetched: map[string]time.Time{}, parked: map[string]int{}}
}

func newReplica(h *Host, db string, shard int, eng engine.Shard) *replica {
	id := models.ShardID(db, shard)
	return &replica{h: h, db: db, shard: shard, id: id, eng: eng,
		lg: h.lg.With(zap.String("db", db), zap.Int("shard", shard))}
}

// broadcast wakes everyone waiting on r.changed. Call with r.mu held.
func (r *replica) broadcastLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// changedLocked is the channel closed at the next broadcast, made when first
// asked for: every fetch broadcasts, and a channel made at each (most with
// nobody waiting on it) was a fifth of what the fetches allocated. Call
// with r.mu held.
func (r *replica) changedLocked() <-chan struct{} {
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// setDesired switches role when the published state changed.
func (r *replica) setDesired(d desired) {
	r.mu.Lock()
	same := r.want.role == d.role && r.want.term == d.term && r.want.leader == d.leader && r.want.address == d.address
	if same {
		moved := !slices.Equal(r.want.replicas, d.replicas)
		r.want.replicas = d.replicas
		rr := r.run
		r.mu.Unlock()
		if moved && d.role == roleLeader && rr != nil {
			rr.kick() // a replica left the assignment: drop it from the set now
		}
		return
	}
	r.mu.Unlock()
	r.stop()
	defer r.h.signalAppend(r) // parked fetches answer a stale term at once, held ones look again
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want, r.since = d, time.Now()
	r.h.following.Add(1) // the node record's followed leaders
	r.ls = newLeaderState(r.eng.LastTxnID())
	r.broadcastLocked()
	r.setTrimFloorLocked(time.Now()) // not leading (yet): the retention bounds alone
	switch d.role {
	case roleLeader:
		r.lg.Info("leading shard", zap.Int64("term", d.term), zap.Uint64("last_txn_id", r.eng.LastTxnID()))
		rr := newRoleRun(roleLeader)
		r.run = rr
		rr.goStep(func(ctx context.Context) { r.lead(ctx, rr, d) })
	case roleFollower:
		r.lg.Info("following shard", zap.Int64("term", d.term), zap.String("leader", d.leader))
		rr := newRoleRun(roleFollower)
		r.run = rr
		bo := backoff.New(50*time.Millisecond, time.Second)
		rr.goStep(func(ctx context.Context) { r.follow(ctx, rr, d, bo, nil) })
	}
}

// stop ends the role's work and waits for it; a follower leaves its fetch
// session.
func (r *replica) stop() {
	r.mu.Lock()
	rr := r.run
	r.run = nil
	r.mu.Unlock()
	if rr == nil {
		return
	}
	rr.stop()
	if rr.role == roleFollower {
		// Parked in a session (no step running): leave it, after which
		// nothing is applied to this replica by it.
		r.h.partAll(r)
	}
}

// --- leader side ---

// lead maintains the in-sync set while this replica leads: it publishes the
// initial set, drops followers that lag past the bound and re-adds them once
// caught up. Removal is persisted before it takes effect (so the master never
// elects a replica that misses an acknowledged write); additions take effect
// before they are persisted (only making acknowledgement stricter).
func (r *replica) lead(ctx context.Context, rr *roleRun, d desired) {
	// Backed off: a first write fails together with many others when etcd
	// is overloaded (or this node's record was just re-created), and 32,000
	// new leaders retrying every 200ms kept a 1,000-node etcd overloaded.
	// It goes through the host's batcher: when a domain dies, a node
	// becomes leader of tens of shards at once, and their first sets go in
	// one read and one txn. A new database's leader takes the set the
	// master created with the placement from its watch instead (placedSet).
	bo := backoff.New(200*time.Millisecond, 5*time.Second)
	initial, rev, placed := r.placedSet(d)
	if placed {
		verify.LeaderInSync(r.id, r.h.nodeID, d.term, initial)
		r.wroteISR(d.term, rev)
		r.h.placedSets.Add(1)
	}
	for gone := false; !placed && ctx.Err() == nil; {
		var err error
		initial, err = r.persistFirstISR(ctx, d)
		if err == nil {
			break
		} else if errors.Is(err, ErrStaleTerm) {
			r.lg.Warn("a newer term owns the in-sync set; not leading", zap.Int64("term", d.term))
			return
		} else if errors.Is(err, ErrShardGone) && !gone {
			gone = true // until the state catches up and stops this role
			r.lg.Warn("shard not in etcd; not publishing its in-sync set", zap.Int64("term", d.term), zap.Error(err))
		} else if !errors.Is(err, ErrShardGone) {
			r.lg.Debug("first in-sync set not written; retrying", zap.Int64("term", d.term), zap.Error(err))
		}
		r.sleep(ctx, bo.Next())
	}
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	for _, n := range initial {
		r.ls.caught[n] = now // members of the last set get one lag bound to show up
		r.ls.fetched[n] = now
	}
	r.ls.isr = initial
	r.setTrimFloorLocked(time.Now())
	r.broadcastLocked()
	r.mu.Unlock()

	// From here on the upkeep is a timer: no goroutine waits for it.
	var upkeep func(ctx context.Context)
	upkeep = func(ctx context.Context) {
		r.maintainISR(ctx, d)
		rr.schedule(r.upkeepDelay(), upkeep)
	}
	rr.schedule(r.h.cfg.LagBound/4, upkeep)
}

// initialISR is the in-sync set a new leadership starts from: the members of
// the set on record that are assigned and live (peers.go: from the watched
// live nodes, or their records read now), or every live replica when no set
// was ever published (all are empty), or ourselves alone when the record is
// not this shard's history. It returns what it read from etcd too (one
// round trip: the set, the shard states, the cluster id, the peers' records).
func (r *replica) initialISR(ctx context.Context, d desired) ([]string, *isrReads, error) {
	rd, err := r.readISR(ctx, r.initialPeers(d))
	if err != nil {
		return nil, nil, err
	}
	initial, err := r.initialFrom(d, rd)
	return initial, rd, err
}

// initialPeers are the replicas whose records initialISR reads: the others
// of d, or, when this process watches the live nodes, those of them its
// view lacks. The view is one watch among several: a node that registered
// just before this one took up its shards may not have reached it yet, and
// a new leader starting from itself alone on a stale view left a new RF 3
// database's shards with one in-sync replica until the others rejoined (a
// leader killed in that window took its shards offline).
func (r *replica) initialPeers(d desired) []string {
	nodes, watched := r.h.liveNodes()
	var others []string
	for _, n := range d.replicas {
		if n == r.h.nodeID {
			continue
		}
		if _, known := nodes.Get(n); watched && known {
			continue
		}
		others = append(others, n)
	}
	return others
}

// initialFrom is initialISR's set, from what was read (rd.peers: the
// records of initialPeers; the others from the watched view).
func (r *replica) initialFrom(d desired, rd *isrReads) ([]string, error) {
	initial := []string{r.h.nodeID}
	var set models.ISR
	ok := rd.isr != nil && json.Unmarshal(rd.isr.Value, &set) == nil
	if staleISR(set, ok, r.eng.LastTerm(), r.eng.LastTxnID(), rd.cid) {
		// The record is not this shard's history (a restored backup): its
		// members may lack entries we hold, so nobody but us is in sync
		// until they have caught up with us.
		r.lg.Info("in-sync set on record is stale; starting from this replica alone",
			zap.Int64("term", d.term), zap.Int64("record_term", set.Term), zap.Uint64("last_term", r.eng.LastTerm()))
		return initial, nil
	}
	for _, n := range d.replicas {
		if n == r.h.nodeID || (ok && !slices.Contains(set.Replicas, n)) {
			continue
		}
		live := r.h.peerCanSync(n)
		if rec, asked := rd.peers[n]; asked {
			p, err := r.h.peerOf(n, rec)
			if err != nil {
				return nil, err
			}
			live = p != nil && p.Writable()
		}
		if live {
			initial = append(initial, n)
		}
	}
	return initial, nil
}

// staleISR reports whether the in-sync record a new leader finds (ok: there
// is one) cannot be this shard's history: our own log holds a term newer than
// the record's (leaders record their set before appending at their term), we
// hold data but nothing was recorded, or it was written in another etcd
// cluster than the one it was read from (cid; 0 unknown).
func staleISR(set models.ISR, ok bool, lastTerm, lastTxn, cid uint64) bool {
	if !ok {
		return lastTxn > 0
	}
	return uint64(max(set.Term, 0)) < lastTerm || (set.ClusterID != 0 && cid != 0 && set.ClusterID != cid)
}

func (r *replica) maintainISR(ctx context.Context, d desired) {
	last := r.eng.LastTxnID()
	r.mu.Lock()
	if r.ls.fenced || r.ls.superseded > 0 {
		r.mu.Unlock()
		return
	}
	isr := r.ls.isr                  // replaced, never changed in place within its length
	r.setTrimFloorLocked(time.Now()) // followers that stopped fetching stop holding the log
	// Kafka's rule: a follower is in sync while it keeps catching up with
	// where the leader was at its previous fetch; under a steady write load
	// it is never exactly at the leader's last txn. Its fetches count too,
	// so a dead follower leaves without writes.
	drop, add, join := decideISR(time.Now(), isrView{
		self: r.h.nodeID, isr: isr, replicas: r.want.replicas, last: last, committed: r.ls.committed,
		acked: r.ls.acked, caught: r.ls.caught, fetched: r.ls.fetched, parked: r.ls.parked, sent: r.ls.sentEnd, window: r.h.cfg.LagBound,
		// A follower whose lease is gone, or whose disk fails, leaves at
		// once when this process watches the live nodes; otherwise by not
		// fetching (or catching up) within the window.
		live: r.h.peerCanSync,
	})
	if !slices.Equal(join, r.ls.joining) {
		r.ls.joining = join // acknowledgements wait for them from now on
		r.broadcastLocked()
	}
	// Additions count for acknowledgements at once, under the lock the
	// decision was taken in: no write is acknowledged between the check that
	// they hold every acknowledged entry and their counting.
	r.ls.isr = append(r.ls.isr, add...)
	if len(drop) == 0 && len(add) == 0 {
		r.ls.retry = nil
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(isr), func(n string) bool { return slices.Contains(drop, n) })
	next = append(next, add...)
	if err := r.persistISRBatched(ctx, d.term, next); err != nil {
		r.lg.Warn("in-sync set not updated", zap.Error(err))
		// Undo the additions, so that the next pass decides them again,
		// after a back-off: a loaded etcd that times writes out is not
		// asked again at the upkeep's pace by every leadership at once (a
		// dead domain's followers are dropped by ~14,000 leaderships at
		// 1,000 simulated nodes; retried every half second they kept etcd
		// timing out until the live nodes' leases ran out).
		r.mu.Lock()
		r.ls.isr = slices.DeleteFunc(slices.Clone(r.ls.isr), func(n string) bool { return slices.Contains(add, n) })
		if r.ls.retry == nil {
			r.ls.retry = backoff.New(r.h.cfg.LagBound/2, quietUpkeep*r.h.cfg.LagBound)
		}
		r.ls.wait = r.ls.retry.Next()
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.ls.retry = nil
	r.ls.isr = next
	r.setTrimFloorLocked(time.Now())
	r.broadcastLocked()
	r.mu.Unlock()
	r.lg.Info("in-sync set changed", zap.Strings("isr", next), zap.Strings("dropped", drop), zap.Strings("added", add), zap.Int64("term", d.term))
}

// write appends a batch at the leader's term and waits until every in-sync
// replica has it durably.
func (r *replica) write(ctx context.Context, term int64, points []lineproto.Point, pre *engine.Prepared) (err error) {
	defer r.h.metrics.observeWrite(time.Now(), len(points), &err)
	return r.logEntry(ctx, term, points, nil, pre)
}

// startWrite is write up to the batch's place in the log queue, in the
// caller's goroutine: its checks, staging and queueing. The returned finish
// waits, as write does, until every in-sync replica has it durably; call
// it once. An error is write's error for a batch never queued.
func (r *replica) startWrite(term int64, points []lineproto.Point, pre *engine.Prepared) (finish func(ctx context.Context) error, err error) {
	start := time.Now()
	q, err := r.queueEntry(term, points, nil, pre)
	if err != nil {
		r.h.metrics.observeWrite(start, len(points), &err)
		return nil, err
	}
	return func(ctx context.Context) (err error) {
		defer r.h.metrics.observeWrite(start, len(points), &err)
		return r.awaitEntry(ctx, term, q)
	}, nil
}

// delete appends a delete at the leader's term and waits until every
// in-sync replica has it durably, as a write.
func (r *replica) delete(ctx context.Context, term int64, d *wire.Delete) error {
	return r.logEntry(ctx, term, nil, d, nil)
}

// logEntry appends points, or a delete (del not nil), at the leader's term
// and waits for the in-sync replicas.
func (r *replica) logEntry(ctx context.Context, term int64, points []lineproto.Point, del *wire.Delete, pre *engine.Prepared) error {
	q, err := r.queueEntry(term, points, del, pre)
	if err != nil {
		return err
	}
	return r.awaitEntry(ctx, term, q)
}

// queuedEntry is an entry queueEntry put in the engine's commit queue.
type queuedEntry struct {
	txn      uint64
	wait     func() error // engine.Enqueue's
	refused  int          // points refused by a field type conflict
	conflict error
}

// queueEntry does logEntry's checks and queues the entry for the engine's
// group commit; an error means nothing was queued (or, a
// *models.PartialWriteError, every point was refused).
func (r *replica) queueEntry(term int64, points []lineproto.Point, del *wire.Delete, pre *engine.Prepared) (queuedEntry, error) {
	if fence := r.h.cfg.WriteFence; fence != nil {
		if err := fence(); err != nil {
			return queuedEntry{}, fmt.Errorf("shard %s: %w", r.id, err)
		}
	}
	r.mu.Lock()
	if err := r.supersededLocked(0); err != nil {
		r.mu.Unlock()
		return queuedEntry{}, err
	}
	if r.want.role != roleLeader || r.want.term != term {
		cur := r.want.term
		r.mu.Unlock()
		if seen := r.h.terms.snapshot([]string{r.id})[r.id]; term < seen {
			return queuedEntry{}, fmt.Errorf("%w: shard %s: request at term %d, this replica accepted term %d", ErrTermBehind, r.id, term, seen)
		}
		return queuedEntry{}, fmt.Errorf("%w: shard %s is at term %d here, request has %d", ErrStaleTerm, r.id, cur, term)
	}
	if err := r.leaderUsableLocked(term); err != nil {
		r.mu.Unlock()
		return queuedEntry{}, err
	}
	if len(r.ls.isr) < r.h.cfg.MinInsync {
		n := len(r.ls.isr)
		r.mu.Unlock()
		return queuedEntry{}, fmt.Errorf("%w: shard %s has %d in-sync replicas, minimum is %d", ErrNotEnoughISR, r.id, n, r.h.cfg.MinInsync)
	}
	r.mu.Unlock()

	// A point of a field the shard holds with another type is refused
	// (InfluxDB's field type conflict), the others are written.
	var refused int
	var conflict error
	if del == nil {
		points, refused, conflict = r.eng.AdmitTypes(points)
	}
	if refused > 0 {
		pre = nil // it encodes the whole batch
		if len(points) == 0 {
			return queuedEntry{}, &models.PartialWriteError{Reason: conflict.Error(), Dropped: refused}
		}
	}
	// Only the numbering and the queueing are serialised (the checks and
	// the encoding are done before, by Stage): the engine's group commit
	// makes the batches queued meanwhile durable together, with one fsync,
	// outside this lock.
	q := queuedEntry{refused: refused, conflict: conflict}
	st, err := r.eng.Stage(engine.Entry{Term: uint64(term), Points: points, Delete: del, Prepared: pre})
	if err == nil {
		r.applyMu.Lock()
		q.txn, q.wait, err = r.eng.Enqueue(st)
		r.applyMu.Unlock()
	}
	if err != nil {
		return queuedEntry{}, r.entryError(q.txn, err)
	}
	return q, nil
}

// entryError is the error logEntry answers for err, the engine's for txn.
func (r *replica) entryError(txn uint64, err error) error {
	if errors.Is(err, engine.ErrKeyTooLarge) || errors.Is(err, engine.ErrBadDelete) {
		// The client's to fix: the write path's line limits let through
		// a key the engine cannot hold.
		return models.Mark(fmt.Errorf("shard %s: %w", r.id, err), models.ErrBadInput)
	}
	if errors.Is(err, engine.ErrLogFailed) {
		// The node fences itself (DiskFence): no write lands here until
		// the log heals.
		return models.Mark(fmt.Errorf("apply %s txn %d: %w", r.id, txn, err), models.ErrInsufficientStorage)
	}
	return fmt.Errorf("apply %s txn %d: %w", r.id, txn, err)
}

// awaitEntry waits until q, queued at term, is durable here and on every
// in-sync replica.
func (r *replica) awaitEntry(ctx context.Context, term int64, q queuedEntry) error {
	if err := q.wait(); err != nil {
		return r.entryError(q.txn, err)
	}
	r.h.signalAppend(r)
	if err := r.awaitAcks(ctx, term, q.txn); err != nil {
		return err
	}
	if q.refused > 0 {
		// Only now: the admitted points are as durable as a 204's.
		return &models.PartialWriteError{Reason: q.conflict.Error(), Dropped: q.refused}
	}
	return nil
}

// awaitAcks waits until the in-sync replicas hold txn, just appended: its
// first look wakes those waiting for an append (r.changed) too, under the
// same lock (the writers of a shard queue on it).
func (r *replica) awaitAcks(ctx context.Context, term int64, txn uint64) error {
	// The timer starts at the first wait: a write nobody else must
	// acknowledge (RF 1, or followers already there) needs none.
	var timeout *time.Timer
	defer func() {
		if timeout != nil {
			timeout.Stop()
		}
	}()
	for appended := true; ; appended = false {
		r.mu.Lock()
		if appended {
			r.broadcastLocked()
		}
		if r.want.role != roleLeader || r.want.term != term {
			r.mu.Unlock()
			return fmt.Errorf("%w: leadership of %s changed while writing", ErrStaleTerm, r.id)
		}
		if r.ls.fenced {
			r.mu.Unlock()
			return fmt.Errorf("%w: shard %s term %d, txn %d not acknowledged", ErrFenced, r.id, term, txn)
		}
		if r.ls.superseded > 0 {
			r.mu.Unlock()
			return fmt.Errorf("%w: shard %s term %d (a peer is at term %d), txn %d not acknowledged", ErrSuperseded, r.id, term, r.ls.superseded, txn)
		}
		if len(r.ls.isr) < r.h.cfg.MinInsync {
			n := len(r.ls.isr)
			r.mu.Unlock()
			return fmt.Errorf("%w: shard %s has %d in-sync replicas, minimum is %d", ErrNotEnoughISR, r.id, n, r.h.cfg.MinInsync)
		}
		ok := r.ackedLocked(r.ls.isr, txn) && r.ackedLocked(r.ls.joining, txn)
		if ok && txn > r.ls.committed {
			r.ls.committed = txn
		}
		ch := r.changedLocked()
		r.mu.Unlock()
		if ok {
			return nil
		}
		if timeout == nil {
			timeout = time.NewTimer(r.h.cfg.AckTimeout)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("%w: shard %s txn %d", ErrAckTimeout, r.id, txn)
		}
	}
}

// ackedLocked says whether every node of nodes but this one acknowledged
// txn; the caller holds mu.
func (r *replica) ackedLocked(nodes []string, txn uint64) bool {
	for _, n := range nodes {
		if n != r.h.nodeID && r.ls.acked[n] < txn {
			return false
		}
	}
	return true
}

// fetchResult is what the leader answers a follower's fetch.
type fetchResult struct {
	entries    []engine.Entry
	truncateTo *uint64 // the follower must truncate its log after this txn
	fullSync   bool    // the follower is too far behind for the log
}

// fetch serves a follower: it checks that the follower's log matches ours at
// `after`, records the acknowledgement, and returns the next entries, waiting
// up to wait for new ones.
func (r *replica) fetch(ctx context.Context, q fetchReq) (fetchResult, error) {
	if err := r.servesTerm(q.term); err != nil {
		return fetchResult{}, err
	}
	// The follower's entry at after is of our own term (or a later one) and
	// our log does not have it: see ErrFenced. Truncating it could destroy
	// acknowledged data. (The engine serves followers only entries counted
	// in LastTxnID, so an entry still in a group commit cannot be one; the
	// case is looked at again with appends excluded before it fences all
	// the same.)
	fence := q.afterTerm >= uint64(q.term) && q.term > 0
	last, res, diverged, err := r.compareLog(q.after, q.afterTerm)
	if diverged && fence {
		r.applyMu.Lock()
		last, res, diverged, err = r.compareLog(q.after, q.afterTerm)
		r.applyMu.Unlock()
		if diverged {
			return fetchResult{}, r.fence(q.term, q.node, q.after, q.afterTerm, last)
		}
	}
	if err != nil || res != nil {
		return *res, err
	}
	ch, err := r.noteFetch(q, last)
	if err != nil {
		return fetchResult{}, err
	}
	entries, err := r.eng.Entries(q.after, q.max)
	if errors.Is(err, engine.ErrCompacted) {
		return fetchResult{fullSync: true}, nil
	}
	if err != nil || len(entries) > 0 || q.wait <= 0 {
		return fetchResult{entries: entries}, err
	}
	t := time.NewTimer(q.wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fetchResult{}, nil
		case <-t.C:
			return fetchResult{}, nil
		case <-ch:
		}
		if r.eng.LastTxnID() > q.after {
			entries, err := r.eng.Entries(q.after, q.max)
			return fetchResult{entries: entries}, err
		}
		r.mu.Lock()
		if r.want.role != roleLeader || r.want.term != q.term {
			r.mu.Unlock()
			return fetchResult{}, fmt.Errorf("%w: shard %s", ErrStaleTerm, r.id)
		}
		ch = r.changedLocked()
		r.mu.Unlock()
	}
}

// fetchReq is one follower's pull: the term it follows, its node id, its
// last entry (after, of term afterTerm), how many entries it takes at most
// and how long it waits at the leader when there is nothing new.
type fetchReq struct {
	term             int64
	node             string
	after, afterTerm uint64
	max              int
	wait             time.Duration
}

// termBelow: this replica has not reached term yet (its role at term, if
// any, is still to come from this node's state).
func (r *replica) termBelow(term int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.want.term < term
}

// servesTerm: this replica leads at term and no peer named a newer one.
func (r *replica) servesTerm(term int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.supersededLocked(term); err != nil {
		return err
	}
	if r.want.role != roleLeader || r.want.term != term {
		return fmt.Errorf("%w: shard %s", ErrStaleTerm, r.id)
	}
	return nil
}

// noteFetch records the follower's progress (q.after confirmed; caught up
// if it holds what we had at its last fetch, last now) and returns the
// channel that closes at the next change; ErrFenced when this leadership
// is fenced.
func (r *replica) noteFetch(q fetchReq, last uint64) (<-chan struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ls.fenced {
		return nil, fmt.Errorf("%w: shard %s term %d", ErrFenced, r.id, q.term)
	}
	if q.after > r.ls.acked[q.node] {
		r.ls.acked[q.node] = q.after
	}
	if end, ok := r.ls.sentEnd[q.node]; ok && q.after >= end {
		r.ls.caught[q.node] = time.Now()
	}
	r.ls.sentEnd[q.node] = last
	r.ls.fetched[q.node] = time.Now()
	r.setTrimFloorLocked(r.ls.fetched[q.node])
	r.broadcastLocked()
	if q.wait <= 0 {
		return nil, nil // nothing waits for the next change
	}
	return r.changedLocked(), nil
}

// park notes that a batched fetch of node is parked on this replica (+1) or
// has left (-1).
func (r *replica) park(node string, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ls.parked == nil {
		return // never led
	}
	r.ls.parked[node] += d
	if d < 0 {
		// The fetch was parked here until now: the follower was fetching.
		// A parked fetch that ends with an answer records its fetch; one
		// the follower cancelled (it re-sends it when a shard joins its
		// session) must count too, or a poll parked past the lag bound
		// would drop the follower from the in-sync set at the upkeep this
		// wakes, to be added back by its next poll.
		r.ls.fetched[node] = time.Now()
	}
	if r.ls.parked[node] <= 0 {
		delete(r.ls.parked, node)
		if r.run != nil {
			// The upkeep's next deadline moved (upkeepDelay), but not to
			// now: the fetch that ended counts as one just made, so the
			// follower can fall out of the set only once the window has
			// passed, and the upkeep comes just after that. By then its
			// next poll, parked again, makes the run find the set quiet,
			// and the polls ending meanwhile share that one run: a
			// follower re-sends its poll whenever a shard joins its
			// session (a new database's, while a cluster is placed), and
			// each re-send at a quarter of the lag bound cost an upkeep of
			// every shard of the poll.
			r.run.soon(r.h.cfg.LagBound + r.h.cfg.LagBound/8)
		}
	}
}

// compareLog checks the follower's last entry (after, of term afterTerm)
// against our log: nothing to do (res nil), a full sync, or a truncation
// (diverged: the follower holds an entry we lack or hold at another term).
func (r *replica) compareLog(after, afterTerm uint64) (last uint64, res *fetchResult, diverged bool, err error) {
	last = r.eng.LastTxnID()
	if after > last {
		return last, &fetchResult{truncateTo: &last}, true, nil
	}
	if after == 0 {
		return last, nil, false, nil
	}
	t, err := r.eng.TermAt(after)
	if errors.Is(err, engine.ErrCompacted) {
		return last, &fetchResult{fullSync: true}, false, nil
	}
	if err != nil {
		return last, &fetchResult{}, false, err
	}
	if t != afterTerm {
		back := after - 1
		return last, &fetchResult{truncateTo: &back}, true, nil
	}
	return last, nil, false, nil
}

// fence stops this leadership (ErrFenced) and says why, once.
func (r *replica) fence(term int64, node string, after, afterTerm, last uint64) error {
	r.mu.Lock()
	first := !r.ls.fenced && r.want.term == term
	if first {
		r.ls.fenced = true
		r.setTrimFloorLocked(time.Now())
		r.broadcastLocked() // writes waiting for acknowledgements fail now
	}
	r.mu.Unlock()
	if first {
		r.lg.Error("a follower holds entries of this leadership term that this log lacks: another process led this term under this node id (a copy of this data dir?) or this log lost entries; not writing, not truncating it, until the term changes",
			zap.Int64("term", term), zap.String("follower", node), zap.Uint64("follower_txn", after),
			zap.Uint64("follower_txn_term", afterTerm), zap.Uint64("last_txn_id", last))
	}
	return fmt.Errorf("%w: shard %s term %d: follower %s has txn %d of term %d, this log ends at %d",
		ErrFenced, r.id, term, node, after, afterTerm, last)
}

// supersededLocked fences this leadership when a follower's fetch names a
// newer term of the shard than the one this replica leads at (peer; 0 for
// none): the master has published a newer leadership, which the follower
// accepted and this replica has not seen yet (or will never see: its etcd
// view is cut), so it must stop acknowledging writes and changing the
// in-sync set now. It returns ErrSuperseded when fenced. Call with r.mu
// held.
func (r *replica) supersededLocked(peer int64) error {
	if r.want.role != roleLeader {
		return nil
	}
	if term := peer; term > r.want.term && term > r.ls.superseded {
		if r.ls.superseded == 0 {
			r.lg.Warn("a peer is at a newer term of this shard; this leadership stops writing until its term changes",
				zap.Int64("term", r.want.term), zap.Int64("peer_term", term))
		}
		r.ls.superseded = term
		r.broadcastLocked() // writes waiting for acknowledgements fail now
	}
	if r.ls.superseded > 0 {
		return fmt.Errorf("%w: shard %s leads at term %d here, a peer is at term %d", ErrSuperseded, r.id, r.want.term, r.ls.superseded)
	}
	return nil
}

// leaderUsableLocked refuses a request to this leader at term while its
// leadership cannot take one: its in-sync set is not published yet, or it
// is fenced. r.mu is held.
func (r *replica) leaderUsableLocked(term int64) error {
	if r.ls.isr == nil {
		return fmt.Errorf("%w: shard %s is still publishing its in-sync set", ErrStaleTerm, r.id)
	}
	if r.ls.fenced {
		return fmt.Errorf("%w: shard %s term %d", ErrFenced, r.id, term)
	}
	return nil
}

// leave removes a follower that is shutting down from the in-sync set at once,
// so writes do not wait for the lag bound.
func (r *replica) leave(ctx context.Context, term int64, node string) error {
	r.mu.Lock()
	if r.want.role != roleLeader || r.want.term != term {
		r.mu.Unlock()
		return fmt.Errorf("%w: shard %s", ErrStaleTerm, r.id)
	}
	if err := r.leaderUsableLocked(term); err != nil {
		r.mu.Unlock()
		return err
	}
	if r.ls.superseded > 0 {
		r.mu.Unlock()
		return fmt.Errorf("%w: shard %s term %d", ErrSuperseded, r.id, term)
	}
	if !slices.Contains(r.ls.isr, node) {
		r.mu.Unlock()
		return nil
	}
	next := slices.DeleteFunc(slices.Clone(r.ls.isr), func(n string) bool { return n == node })
	r.mu.Unlock()
	if err := r.persistISRBatched(ctx, term, next); err != nil {
		return err
	}
	r.mu.Lock()
	r.ls.isr = next
	r.ls.acked[node] = 0
	delete(r.ls.caught, node)
	delete(r.ls.sentEnd, node)
	delete(r.ls.fetched, node)
	r.setTrimFloorLocked(time.Now())
	r.broadcastLocked()
	r.mu.Unlock()
	r.lg.Info("follower left the in-sync set", zap.String("follower", node), zap.Strings("isr", next))
	return nil
}

// setTrimFloorLocked tells the engine how far its log may be trimmed: while
// this replica leads with a published in-sync set, as far as its followers
// allow (trimFloor); otherwise (following, publishing, fenced) the retention
// bounds alone decide, since the log may have to serve a leadership to come
// or cut a divergent tail. Call with r.mu held.
func (r *replica) setTrimFloorLocked(now time.Time) {
	if r.want.role != roleLeader || r.ls.isr == nil || r.ls.fenced {
		r.eng.SetTrimFloor(0)
		return
	}
	r.eng.SetTrimFloor(trimFloor(now, isrView{self: r.h.nodeID, isr: r.ls.isr, replicas: r.want.replicas,
		acked: r.ls.acked, fetched: r.ls.fetched, parked: r.ls.parked, window: r.h.cfg.LagBound}))
}

func (r *replica) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
