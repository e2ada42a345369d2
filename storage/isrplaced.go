package storage

import (
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// placedSet is the first in-sync set a new leadership takes from the
// watched state, without reading etcd: the set the master created with the
// database's placement (master.firstSets: every replica, this leader first,
// at the placement's term), which persistFirstISR would read and adopt
// unchanged. At 1,000 nodes a host gets one new leadership at a time, and
// that read (the set, the states, this node's record: one round trip and
// its decode for every shard of every new database) was a fifth of the
// agents' CPU at placement. ok is false, and the set is read as before,
// unless all of these hold:
//
//   - the states say the placement's txn created the sets (FirstSets), in
//     the etcd cluster the watch listed the states and the assignments from,
//     and the states and the assignment are still those of that txn (the
//     same mod revision; the master writes both keys together only when it
//     places shards, and sets FirstSets only in the txn that creates the
//     sets). The set created then was every replica of that
//     assignment, led by this node at this term (the states of that txn
//     say so), so the shard has had no other leadership: no other node
//     wrote its set since, and no newer term had one (a newer term is
//     written in the states, which would no longer be that txn's);
//   - this replica's log is empty. The only writer of the set since then
//     is this node at this term: an earlier run of this role, in this
//     process or before a restart, which may have shrunk it to drop a
//     lagging follower and acknowledged writes without it. Whatever such a
//     run wrote is in the log before it is acknowledged, so with an empty
//     log no write was acknowledged at this term and every replica holds
//     everything any acknowledged write holds: each may count as in sync.
//     With entries in the log the set on record may exclude a replica
//     that misses them, and is read;
//   - every replica is live and writable in the watched live nodes
//     (initialFrom would leave the others out and write the set).
//
// The set taken may be larger than one on record (an earlier run's shrink,
// above), never smaller: acknowledgements wait for every member, so each
// member of the set on record holds every acknowledged write, which is
// what the master's election from that set needs. Like an adopted read
// (prepareISR), the view may be behind etcd: a newer term the master wrote
// since stops this role when the watch brings it, and its followers fence
// this leadership's fetches meanwhile (ErrSuperseded) as they would after
// a read made just before that term was written. No write is made from
// the view: later sets are written with a fresh read and its compares,
// among them this node's record's create revision, which is why the
// record is not read here (a copy of this process that took the node id
// over cannot shrink a set; with the full set it acknowledges nothing its
// followers, fetching from the holder's address, did not fetch from it).
func (r *replica) placedSet(d desired) (set []string, rev int64, ok bool) {
	if !r.h.stateFenced() || r.eng.LastTxnID() != 0 || r.eng.LastTerm() != 0 {
		return nil, 0, false
	}
	st := r.h.state()
	if st == nil || st.FromBackup {
		return nil, 0, false
	}
	ss, has := st.ShardStates.Get(r.db)
	cid := ss.FirstSets
	if !has || cid == 0 || st.ListedFrom[statemachine.SourceShardState] != cid || st.ListedFrom[statemachine.SourceAssign] != cid {
		return nil, 0, false
	}
	rev = st.ModRev(statemachine.SourceShardState, r.db)
	if rev == 0 || st.ModRev(statemachine.SourceAssign, r.db) != rev {
		return nil, 0, false
	}
	a, has := st.Assignments.Get(r.db)
	if !has {
		return nil, 0, false
	}
	si := slices.IndexFunc(ss.Shards, func(s models.ShardState) bool { return s.ID == r.shard })
	ai := slices.IndexFunc(a.Shards, func(s models.ShardAssignment) bool { return s.ID == r.shard })
	if si < 0 || ai < 0 {
		return nil, 0, false
	}
	s, replicas := ss.Shards[si], a.Shards[ai].Replicas
	if s.Leader != r.h.nodeID || s.Term != d.term || s.Status != models.StatusOnline ||
		!slices.Contains(replicas, r.h.nodeID) || !sameMembers(replicas, d.replicas) {
		return nil, 0, false
	}
	if _, watched := r.h.liveNodes(); !watched {
		return nil, 0, false
	}
	set = make([]string, 0, len(replicas))
	set = append(set, r.h.nodeID)
	for _, n := range replicas {
		if n == r.h.nodeID {
			continue
		}
		if !r.h.peerCanSync(n) {
			return nil, 0, false
		}
		set = append(set, n)
	}
	return set, rev, true
}
