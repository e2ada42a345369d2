package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/verify"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// ErrShardGone: the shard's state or its in-sync set vanished from etcd while
// this replica led it (a dropped database, an emptied or restored etcd).
var ErrShardGone = errors.New("storage: shard no longer in etcd")

// persistISR writes the in-sync set, fenced so that a leader never writes a
// set for a shard that etcd no longer has:
//   - it never overwrites a set of a newer term, and compares the key's mod
//     revision as read;
//   - when the storage cluster shares the main etcd, it reads the database's
//     shard-state key, which must name this node leader at this term, and the
//     same txn requires that key's create revision as read: no set is
//     (re)created for a database etcd dropped or never had (a restore), yet
//     the master's updates of other shards' states do not fail the write;
//   - without that fence (the cluster has its own etcd), it creates an absent
//     key only on its term's first write: a set this leader wrote and that is
//     now gone was removed by someone else (etcd wiped, an older backup
//     restored) and is not recreated;
//   - a set on record that is exactly the one it would write (same leader,
//     term, members and etcd cluster id), read together with this node's
//     record still being the one this process registered, is adopted
//     instead (master.firstSets writes a new database's first sets).
//
// ErrNotHolder: this process no longer holds its node id's record (another
// process re-created it after this one's lease lapsed: a copy of the data
// dir), so it may not change in-sync sets: it would shrink them to itself and
// acknowledge writes alone while the other process leads in its place.
var ErrNotHolder = errors.New("storage: node id held by another process")

// isrReads is what a leader reads before it writes its in-sync set: the set
// on record, the database's shard states (the fence, when the storage
// cluster shares the main etcd), the etcd cluster id, and the records of the
// peers it asked about (a host that does not watch the live nodes). One
// round trip when the store reads several keys at once (multiGetter), which
// a new leadership's first write then reuses: it used to cost seven.
type isrReads struct {
	isr, state *kv.KeyValue
	self       *kv.KeyValue // this node's record, when this process knows its create revision
	cid        uint64
	peers      map[string]*kv.KeyValue // the records asked for; nil values: not live
}

// multiGetter reads several keys and the cluster id in one round trip
// (kv.EtcdStore and kv.MemoryStore do). The read may be serializable (a
// member's applied state, not a read index): what it returns guards
// nothing by itself; every write made from it compares revisions in etcd.
type multiGetter interface {
	GetMany(ctx context.Context, keys []string) ([]*kv.KeyValue, uint64, error)
}

// stateFenced: in-sync set writes are fenced on the shard state key too (the
// storage cluster's etcd is the main one).
func (h *Host) stateFenced() bool {
	return h.cfg.StateStore != nil && h.cfg.StateStore == h.store
}

// readISR reads what persistISR and initialISR need, with the records of
// peers when asked.
func (r *replica) readISR(ctx context.Context, peers []string) (*isrReads, error) {
	var keys []string
	add := func(k string) int { keys = append(keys, k); return len(keys) - 1 }
	at := r.h.isrKeysOf(r, add)
	at.addPeers(peers, func(p string) int { return add(r.h.ck.Node(p)) })
	var vals []*kv.KeyValue
	var cid uint64
	if g, ok := r.h.store.(multiGetter); ok {
		var err error
		if vals, cid, err = g.GetMany(ctx, keys); err != nil {
			return nil, err
		}
	} else {
		for _, k := range keys {
			v, err := r.h.store.Get(ctx, k)
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
		}
		var err error
		if cid, err = r.h.store.ClusterID(ctx); err != nil {
			return nil, err
		}
	}
	if len(vals) != len(keys) {
		return nil, errShortRead(len(vals), len(keys))
	}
	return at.reads(vals, cid), nil
}

// isrKeys is where the keys an in-sync set write reads sit in a read of
// several keys: the set, the database's shard states (-1: not fenced: the
// storage cluster has an etcd of its own), this node's record (-1: this
// process does not know its create revision), and peers' records (a new
// leadership's, when the host does not watch the live nodes).
type isrKeys struct {
	isr, state, self int
	peers            map[string]int
}

// addPeers adds the records of peers to the read (key adds a peer's).
func (at *isrKeys) addPeers(peers []string, key func(string) int) {
	if len(peers) == 0 {
		return
	}
	at.peers = make(map[string]int, len(peers))
	for _, p := range peers {
		at.peers[p] = key(p)
	}
}

// isrKeysOf adds the keys r's in-sync set write reads to a read; key adds
// one and says where it is.
func (h *Host) isrKeysOf(r *replica, key func(string) int) isrKeys {
	at := isrKeys{isr: key(h.ck.ISR(r.db, r.shard)), state: -1, self: -1}
	if h.stateFenced() {
		at.state = key(h.cfg.StateKeys.ShardState(r.db))
	}
	if h.recordRev.Load() != 0 {
		at.self = key(h.ck.Node(h.nodeID))
	}
	return at
}

// reads is what the write read, from the values of the read.
func (at isrKeys) reads(vals []*kv.KeyValue, cid uint64) *isrReads {
	rd := &isrReads{isr: vals[at.isr], cid: cid}
	if at.state >= 0 {
		rd.state = vals[at.state]
	}
	if at.self >= 0 {
		rd.self = vals[at.self]
	}
	if at.peers != nil {
		rd.peers = make(map[string]*kv.KeyValue, len(at.peers))
		for p, i := range at.peers {
			rd.peers[p] = vals[i]
		}
	}
	return rd
}

// errShortRead: a store answered a read of several keys with another count.
func errShortRead(got, want int) error {
	return fmt.Errorf("%w: %d values read for %d keys", kv.ErrUnavailable, got, want)
}

// persistISR writes isr as the set of this leadership at term, from what rd
// read (nil: read now).
func (r *replica) persistISR(ctx context.Context, term int64, isr []string, rd *isrReads) error {
	if rd == nil {
		var err error
		if rd, err = r.readISR(ctx, nil); err != nil {
			return err
		}
	}
	w, err := r.prepareISR(term, isr, rd)
	if err != nil || w == nil {
		return err
	}
	ok, rev, err := r.h.store.Txn(ctx, w.cmps, []kv.Op{w.put})
	if err != nil {
		return err
	}
	if !ok {
		return r.isrRefused(ctx)
	}
	r.wroteISR(term, rev)
	return nil
}

// isrTxn is one in-sync set write as prepared from what was read: the
// compares that fence it and its put.
type isrTxn struct {
	cmps []kv.Cmp
	put  kv.Op
}

// prepareISR decides, from rd, whether isr may be written at term and with
// which compares (see persistISR); nil (and no error) when the set on record
// is exactly this one and is adopted instead.
func (r *replica) prepareISR(term int64, isr []string, rd *isrReads) (*isrTxn, error) {
	key := r.h.ck.ISR(r.db, r.shard)
	r.mu.Lock()
	wrote := r.ls.isrTerm == term && r.ls.isrRev != 0
	r.mu.Unlock()
	kvp, cid := rd.isr, rd.cid
	fence, err := r.stateFence(rd.state, cid, term)
	if err != nil {
		return nil, err
	}
	cmps := []kv.Cmp{kv.ModRevIs(key, 0)}
	switch {
	case kvp == nil && wrote && fence == nil:
		return nil, fmt.Errorf("%w: the in-sync set of %s written at term %d was removed; not recreating it", ErrShardGone, r.id, term)
	case kvp != nil:
		var cur models.ISR
		if json.Unmarshal(kvp.Value, &cur) == nil {
			if cur.Term > term {
				return nil, fmt.Errorf("%w: in-sync set of %s is at term %d", ErrStaleTerm, r.id, cur.Term)
			}
			// A set restored from another etcd cluster at a term not below
			// ours belongs to the restored state's leadership: the master
			// re-elects the shard from every replica's log first.
			if cur.ClusterID != 0 && cid != 0 && cur.ClusterID != cid && cur.Term >= term {
				return nil, fmt.Errorf("%w: the in-sync set of %s at term %d was restored from etcd cluster %x", ErrStaleTerm, r.id, cur.Term, cur.ClusterID)
			}
			// Exactly the set this write would make, already there (the
			// master records a new database's first sets with its
			// placement: master.firstSets): adopted, not rewritten. The
			// state fence above held on what was read with it. That read
			// may be a member's applied state, a little behind: a leader
			// adopting from it acts on a view no older than the one it
			// leads from anyway until its watch brings a newer term, and a
			// follower fetching at that newer term fences it (ErrSuperseded).
			if cur.Leader == r.h.nodeID && cur.Term == term && cid != 0 && cur.ClusterID == cid && sameMembers(cur.Replicas, isr) && r.holdsRecord(rd) {
				r.wroteISR(term, kvp.ModRev)
				return nil, nil
			}
		}
		cmps[0] = kv.ModRevIs(key, kvp.ModRev)
	}
	if fence != nil {
		cmps = append(cmps, *fence)
	}
	// Only the process holding this node id's record may change the set: a
	// copy that re-created the record after our lease lapsed leads in our
	// place, and a set shrunk to ourselves would let us acknowledge alone.
	if rev := r.h.recordRev.Load(); rev != 0 {
		cmps = append(cmps, kv.CreateRevIs(r.h.ck.Node(r.h.nodeID), rev))
	}
	verify.LeaderInSync(r.id, r.h.nodeID, term, isr)
	val, _ := json.Marshal(models.ISR{Leader: r.h.nodeID, Term: term, Replicas: isr, ClusterID: cid})
	return &isrTxn{cmps: cmps, put: kv.OpPut(key, val, 0)}, nil
}

// isrRefused says why a fenced in-sync set write was refused.
func (r *replica) isrRefused(ctx context.Context) error {
	if rev := r.h.recordRev.Load(); rev != 0 {
		if node, gerr := r.h.store.Get(ctx, r.h.ck.Node(r.h.nodeID)); gerr == nil && (node == nil || node.CreateRev != rev) {
			return fmt.Errorf("%w: the record of node %s is no longer the one this process registered", ErrNotHolder, r.h.nodeID)
		}
	}
	return fmt.Errorf("in-sync set or state of %s changed concurrently", r.id)
}

// wroteISR notes the set on record for this leadership (term) at rev.
func (r *replica) wroteISR(term, rev int64) {
	r.mu.Lock()
	r.ls.isrTerm, r.ls.isrRev = term, rev
	r.mu.Unlock()
}

// stateFence checks the database's shard states as read from the main etcd
// (when the storage cluster lives there too: rd.state) name this node leader
// of the shard at term, and returns a compare on the key's create revision
// (the database's states, not their latest update).
// Nil when the cluster has its own etcd (no txn can span both).
func (r *replica) stateFence(kvp *kv.KeyValue, cid uint64, term int64) (*kv.Cmp, error) {
	if !r.h.stateFenced() {
		return nil, nil
	}
	key := r.h.cfg.StateKeys.ShardState(r.db)
	if kvp == nil {
		return nil, fmt.Errorf("%w: no shard state for database %s", ErrShardGone, r.db)
	}
	ss, err := r.h.statesAsRead(r.db, kvp, cid)
	if err != nil {
		return nil, fmt.Errorf("%w: shard state of %s unreadable: %w", ErrShardGone, r.db, err)
	}
	for _, s := range ss.Shards {
		if s.ID != r.shard {
			continue
		}
		if s.Leader != r.h.nodeID || s.Term != term {
			return nil, fmt.Errorf("%w: shard %s is led by %s at term %d in etcd", ErrStaleTerm, r.id, s.Leader, s.Term)
		}
		cmp := kv.CreateRevIs(key, kvp.CreateRev)
		return &cmp, nil
	}
	return nil, fmt.Errorf("%w: database %s has no shard %d in etcd", ErrShardGone, r.db, r.shard)
}

// statesAsRead is db's shard states as kvp holds them (read from the etcd
// cluster cid). The watched state already holds them decoded when it shows
// that very version: listed from the same etcd cluster, at the same mod
// revision (one revision of one cluster is one write). Then kvp is not
// decoded: every leader of a new database reads the whole record for its
// fence, 32,000 decodes of a 32-shard record to place 1,000 databases.
// Otherwise (the watch is behind or ahead, the state came from the local
// backup, another cluster) kvp is decoded.
func (h *Host) statesAsRead(db string, kvp *kv.KeyValue, cid uint64) (models.ShardStates, error) {
	if st := h.state(); st != nil && cid != 0 && kvp.ModRev != 0 && !st.FromBackup &&
		st.ListedFrom[statemachine.SourceShardState] == cid && st.ModRev(statemachine.SourceShardState, db) == kvp.ModRev {
		if ss, ok := st.ShardStates.Get(db); ok {
			return ss, nil
		}
	}
	h.statesDecoded.Add(1)
	var ss models.ShardStates
	err := json.Unmarshal(kvp.Value, &ss)
	return ss, err
}

// sameMembers: a and b hold the same nodes (each once), in any order.
func sameMembers(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y) && len(slices.Compact(x)) == len(a)
}

// holdsRecord: this process's node record, as rd read it, is the one it
// registered (or it does not know which that is).
func (r *replica) holdsRecord(rd *isrReads) bool {
	rev := r.h.recordRev.Load()
	return rev == 0 || (rd.self != nil && rd.self.CreateRev == rev)
}
