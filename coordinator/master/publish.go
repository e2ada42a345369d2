package master

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// publishWriters bounds the batches of one publication in flight at once.
const publishWriters = 16

// errLockHeld: a failover lock the master needed is held by another
// orchestrator (a previous master whose lease has not ended yet).
var errLockHeld = errors.New("failover lock held by another orchestrator; retrying")

// statesUpdate is one database's new shard states, computed from the states
// the publication's snapshot holds for it: the shards in changed differ;
// extra ops (operator records) are written in the same txn as the states.
type statesUpdate struct {
	db      string
	next    models.ShardStates
	changed []int
	extra   []kv.Op
	value   []byte // next, encoded (publishBatch fills it in)
}

// publishStates publishes one database's states: a batch of one.
func (m *Master) publishStates(ctx context.Context, st *statemachine.State, db string, next models.ShardStates, changed []int, extra ...kv.Op) error {
	return m.publishBatch(ctx, st, []statesUpdate{{db: db, next: next, changed: changed, extra: extra}})[db]
}

// publishBatch publishes the new states of many databases in few etcd round
// trips. The updates are cut into batches that each fit one txn
// (txnBatches); a batch takes the failover lock of each of its databases
// and writes every database's states in one txn fenced on the term and
// guarded by each database's mod revision in st, and releases the locks
// (publishTxn): two round trips, the second off the publication's path,
// for many databases where each database took three. A batch refused as a
// whole (one database's states changed since st, or a lock is held) is
// tried again without the databases that cannot be published
// (publishTxnRetry), so only they fail and the others are published. It
// returns the databases whose publication failed, with why (errChanged:
// the caller recomputes them on a fresh state; kv.ErrDeposed when the term
// ended).
func (m *Master) publishBatch(ctx context.Context, st *statemachine.State, ups []statesUpdate) map[string]error {
	failed := map[string]error{}
	var published []string
	var last int64 // the highest revision a batch was published at
	var mu sync.Mutex
	fail := func(db string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed[db] = err
	}
	done := func(batch []statesUpdate, rev int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, u := range batch {
			published = append(published, u.db)
		}
		last = max(last, rev)
	}
	for i := range ups {
		ups[i].value = mustJSON(ups[i].next)
	}
	sem := make(chan struct{}, publishWriters)
	var wg sync.WaitGroup
	var releases lockReleases
	for _, batch := range txnBatches(ups) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.publishTxnRetry(ctx, st, batch, fail, done, &releases)
		}()
	}
	wg.Wait()
	// The published batches' locks go once the last batch is published:
	// each release is a txn as big as a batch's, and released as each
	// batch was published they took etcd's apply turns from the batches
	// still to come (a domain's failover is ~20 of each at 1,000 nodes).
	releases.start(ctx, m)
	// The local state is waited for once, for the last batch's revision,
	// with every batch's txn already applied: a writer that waited for it
	// (the state manager applies the agents' in-sync writes of the same
	// moments too) held its slot while later batches queued, and a whole
	// domain's failover at 300 nodes is 32 batches, 16 at a time.
	if last > 0 {
		if err := m.awaitRev(ctx, statemachine.SourceShardState, last); err != nil {
			for _, db := range published {
				failed[db] = err
			}
		}
	}
	releases.wait()
	return failed
}

// lockReleases keeps the failover locks of a publication's published
// batches (each batch's under its own token) until they are released
// together, in the background, once every batch is published.
type lockReleases struct {
	mu   sync.Mutex
	held []heldLocks
	wg   sync.WaitGroup
}

type heldLocks struct {
	token []byte
	keys  []string
}

func (l *lockReleases) add(token []byte, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = append(l.held, heldLocks{token, keys})
}

// start releases every lock added so far, each batch's in a goroutine of
// its own (wait waits for them).
func (l *lockReleases) start(ctx context.Context, m *Master) {
	l.mu.Lock()
	held := l.held
	l.held = nil
	l.mu.Unlock()
	for _, h := range held {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			m.releaseLocks(context.WithoutCancel(ctx), h.token, h.keys)
		}()
	}
}

func (l *lockReleases) wait() { l.wg.Wait() }

// publishTxnRetry publishes batch (publishTxn) and, when it is refused,
// what of it can be: without the databases whose states changed
// (unchanged), and one database at a time when a failover lock is held (a
// lock an earlier orchestrator left until its lease ends holds up its own
// database only). fail records each database that cannot be published.
func (m *Master) publishTxnRetry(ctx context.Context, st *statemachine.State, batch []statesUpdate, fail func(string, error),
	done func([]statesUpdate, int64), releases *lockReleases) {
	rev, err := m.publishTxn(ctx, st, batch, releases)
	if len(batch) > 1 && errors.Is(err, errChanged) {
		rest, rerr := m.unchanged(ctx, st, batch, fail)
		if batch, err = rest, rerr; err == nil && len(batch) > 0 {
			rev, err = m.publishTxn(ctx, st, batch, releases)
		}
	}
	if len(batch) > 1 && errors.Is(err, errLockHeld) {
		for _, u := range batch {
			m.publishTxnRetry(ctx, st, []statesUpdate{u}, fail, done, releases)
		}
		return
	}
	if err != nil {
		for _, u := range batch {
			fail(u.db, err)
		}
		return
	}
	if len(batch) > 0 {
		done(batch, rev)
	}
}

// unchanged reads the states of batch's databases from etcd and returns the
// updates whose states are still the ones in st; the others fail with
// errChanged (the caller recomputes them on a fresh state).
func (m *Master) unchanged(ctx context.Context, st *statemachine.State, batch []statesUpdate, fail func(string, error)) ([]statesUpdate, error) {
	var rest []statesUpdate
	for _, u := range batch {
		kvp, err := m.cfg.Store.Get(ctx, m.cfg.Keys.ShardState(u.db))
		if err != nil {
			return batch, err
		}
		var rev int64
		if kvp != nil {
			rev = kvp.ModRev
		}
		if rev != st.ModRev(statemachine.SourceShardState, u.db) {
			fail(u.db, fmt.Errorf("%w: shard states of %s", errChanged, u.db))
			continue
		}
		rest = append(rest, u)
	}
	return rest, nil
}

// txnBatches cuts ups, in order, into batches that each fit one txn of at
// most maxTxnOps operations and about maxTxnBytes bytes: each database's
// failover lock, states and extra ops (publishTxn takes the locks and
// publishes the states in one txn). A database too big for one txn is a
// batch of its own.
func txnBatches(ups []statesUpdate) [][]statesUpdate {
	var out [][]statesUpdate
	var cur []statesUpdate
	ops, size := 0, 0
	for _, u := range ups {
		o, n := 2+len(u.extra), updateBytes(u)
		if len(cur) > 0 && (ops+o > maxTxnOps || size+n > maxTxnBytes) {
			out = append(out, cur)
			cur, ops, size = nil, 0, 0
		}
		cur = append(cur, u)
		ops += o
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// updateBytes is about what u adds to a txn: its states, its extra ops and
// its lock (a key and a token of a few dozen bytes).
func updateBytes(u statesUpdate) int {
	n := len(u.value) + 2*len(u.db) + 128
	for _, op := range u.extra {
		n += len(op.Key) + len(op.Value)
	}
	return n
}

// publishTxn takes the failover lock of each database of batch (a unique
// value bound to the master's lease; only its creator deletes it),
// publishes the databases' states fenced on the term and guarded by the
// mod revision of each database's states in st (the value they were
// computed from), and returns the revision they were published at; the
// locks are released in the background once every batch of the
// publication is published (releases). The caller waits for the local
// state.
//
// The lock is per database, not per shard: the txn that takes it is the
// one that writes the database's states (one key for all its shards), so a
// lock per shard guarded nothing more, and cost a whole domain's failover
// at 1,000 nodes ~10,700 leased puts and as many deletes, in ~120 txns of
// each where it now takes ~20.
//
// A batch takes its locks and publishes its states in one txn. When that
// txn is refused, the locks are taken on their own first and then the
// states are published, which tells a held lock (errLockHeld) from states
// that changed (errChanged).
func (m *Master) publishTxn(ctx context.Context, st *statemachine.State, batch []statesUpdate, releases *lockReleases) (rev int64, err error) {
	token := []byte(m.cfg.NodeID + "/" + strconv.FormatInt(m.cfg.Term, 10) + "/" + strconv.FormatInt(m.cfg.Now().UnixNano(), 10))
	keys := make([]string, 0, len(batch))
	for _, u := range batch {
		keys = append(keys, m.cfg.Keys.FailoverLock(u.db))
	}
	var locked []string
	// Released even when a txn fails: a timeout may come after etcd applied
	// it, and a lock left behind would hold the database up until the lease
	// ends (the release deletes only what holds token). After a failure at
	// once, as the caller may try the same databases again; once published,
	// with the publication's other batches' (lockReleases).
	defer func() {
		switch {
		case len(locked) == 0:
		case err != nil:
			m.releaseLocks(context.WithoutCancel(ctx), token, locked)
		default:
			releases.add(token, locked)
		}
	}()
	lockOps := func(keys []string) ([]kv.Cmp, []kv.Op) {
		cmps := make([]kv.Cmp, 0, len(keys))
		ops := make([]kv.Op, 0, len(keys))
		for _, k := range keys {
			cmps = append(cmps, kv.CreateRevIs(k, 0))
			ops = append(ops, kv.OpPut(k, token, m.cfg.Session.Lease()))
		}
		return cmps, ops
	}
	var scmps []kv.Cmp
	var sops []kv.Op
	for _, u := range batch {
		verifyStates(st.ShardStates.At(u.db), u.next, u.changed)
		key := m.cfg.Keys.ShardState(u.db)
		scmps = append(scmps, kv.ModRevIs(key, st.ModRev(statemachine.SourceShardState, u.db)))
		sops = append(append(sops, kv.OpPut(key, u.value, 0)), u.extra...)
	}
	published := func(rev int64) (int64, error) {
		for _, u := range batch {
			m.cfg.Metrics.published(st.ShardStates.At(u.db), u.next, u.changed)
		}
		return rev, nil
	}
	cmps, ops := lockOps(keys)
	locked = keys
	ok, rev, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, append(cmps, scmps...), append(ops, sops...))
	if err != nil {
		return 0, err
	}
	if ok {
		return published(rev)
	}
	locked = nil // refused: nothing was taken
	for i := 0; i < len(keys); i += maxTxnOps {
		chunk := keys[i:min(i+maxTxnOps, len(keys))]
		cmps, ops := lockOps(chunk)
		locked = append(locked, chunk...)
		ok, _, terr := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, cmps, ops)
		if terr != nil {
			return 0, terr
		}
		if !ok {
			return 0, fmt.Errorf("%w: of %s", errLockHeld, dbNames(batch))
		}
	}
	ok, rev, err = m.cfg.Election.FencedTxn(ctx, m.cfg.Term, scmps, sops)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: shard states of %s", errChanged, dbNames(batch))
	}
	return published(rev)
}

// releaseLocks deletes the failover locks keys that still hold token: one
// txn per maxTxnOps keys (a failover of 1000 databases would otherwise wait
// for 1000 round trips). When a chunk's txn is refused (some lock of it is not
// ours: the lock txn failed or timed out and took none or only some, or
// another orchestrator holds one), one read finds the ones that hold token
// and one txn deletes them; only if that is refused too (a lock changed in
// between), one txn per key. A lock txn timing out under a loaded etcd
// used to cost one txn per key of its batch, in a row: 16 batches of 100
// releases held a whole domain's failover up for 85 s at 300 nodes.
func (m *Master) releaseLocks(ctx context.Context, token []byte, keys []string) {
	for i := 0; i < len(keys); i += maxTxnOps {
		chunk := keys[i:min(i+maxTxnOps, len(keys))]
		if m.deleteHeld(ctx, token, chunk) {
			continue
		}
		if g, ok := m.cfg.Store.(multiGetter); ok {
			vals, _, err := g.GetMany(ctx, chunk)
			if err == nil && len(vals) == len(chunk) {
				var ours []string
				for j, v := range vals {
					if v != nil && bytes.Equal(v.Value, token) {
						ours = append(ours, chunk[j])
					}
				}
				if len(ours) == 0 || m.deleteHeld(ctx, token, ours) {
					continue
				}
				chunk = ours
			}
		}
		for _, k := range chunk {
			m.deleteHeld(ctx, token, []string{k})
		}
	}
}

// multiGetter reads several keys in one round trip (kv.EtcdStore and
// kv.MemoryStore do).
type multiGetter interface {
	GetMany(ctx context.Context, keys []string) ([]*kv.KeyValue, uint64, error)
}

// deleteHeld deletes keys in one txn if every one holds token; false when
// it did not.
func (m *Master) deleteHeld(ctx context.Context, token []byte, keys []string) bool {
	cmps := make([]kv.Cmp, 0, len(keys))
	ops := make([]kv.Op, 0, len(keys))
	for _, k := range keys {
		cmps = append(cmps, kv.ValueIs(k, token))
		ops = append(ops, kv.OpDelete(k))
	}
	ok, _, err := m.cfg.Store.Txn(ctx, cmps, ops)
	return err == nil && ok
}

// dbNames lists the databases of batch for an error.
func dbNames(batch []statesUpdate) string {
	names := make([]string, len(batch))
	for i, u := range batch {
		names[i] = u.db
	}
	return strings.Join(names, ", ")
}
