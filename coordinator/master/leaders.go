// Package master is the elected master's work: it turns database configs into
// shard assignments (through placement), publishes shard leaders and terms,
// fails leadership over when storage nodes die, and moves replicas for drains,
// replica-factor changes and rebalancing. Decisions are pure functions over a
// state snapshot (this file and plan.go); master.go executes them with fenced
// writes while the term lasts.
package master

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cairn-db/cairn/models"
)

// ShardInputs is what a leader decision reads about one database.
type ShardInputs struct {
	DB     string
	Assign models.Assignment
	States models.ShardStates
	Live   map[string]models.StorageNode // live storage nodes of the database's cluster
	ISR    map[string]models.ISR         // cluster's in-sync sets by shard id
	Drains map[string]models.Drain
	// ClusterID is the etcd cluster the in-sync sets were listed from (0:
	// unknown): a set written in another one was restored from a backup.
	ClusterID uint64
}

// inSync returns the shard's last known in-sync set. A shard whose leader never
// published one (no data written yet) counts all its replicas as in sync: they
// are all empty and equal. A stale record (isrTrusted) vouches for nobody.
func inSync(in ShardInputs, sh models.ShardAssignment) []string {
	if !isrTrusted(in, sh) {
		return nil
	}
	if set, ok := in.ISR[models.ShardID(in.DB, sh.ID)]; ok {
		return set.Replicas
	}
	return sh.Replicas
}

// liveTerm is the highest term any live node holds in its log of the shard.
func liveTerm(in ShardInputs, shard int) int64 {
	id := models.ShardID(in.DB, shard)
	var t int64
	for _, n := range in.Live {
		t = max(t, n.MaxTerm[id])
	}
	return t
}

// NextTerm is the term of a new leadership of shard whose published state is
// cur: above the published term and above every term a live replica already
// holds in its log, so terms never go backwards under data (a restored etcd
// may publish a term older than the replicas' logs).
func NextTerm(in ShardInputs, cur models.ShardState) int64 {
	return max(cur.Term, liveTerm(in, cur.ID)) + 1
}

// isrTrusted reports whether the shard's in-sync record can be believed. A
// leader publishes its set at its term before it appends anything at that
// term, so the record's term is never below a term a replica holds in its
// log. A live replica holding a newer term than the record (or any data when
// there is no record) proves that leaderships happened the record never saw:
// it is a stale copy (a restored backup, a hand edit), and a replica that
// left the set since (missing acknowledged writes) may be listed in it while
// the ones that hold those writes are not.
func isrTrusted(in ShardInputs, sh models.ShardAssignment) bool {
	lt := liveTerm(in, sh.ID)
	set, ok := in.ISR[models.ShardID(in.DB, sh.ID)]
	if !ok {
		return lt == 0
	}
	return set.Term >= lt && !restoredISR(in, sh)
}

// restoredISR: the shard's in-sync record was written in another etcd
// cluster than the one it was read from, so it is a restored copy. Even with
// no live replica proving it stale, a replica listed in it may have fallen
// behind since the backup (its log then holds no newer term), and a live
// leader of the restored state may be that replica.
func restoredISR(in ShardInputs, sh models.ShardAssignment) bool {
	set, ok := in.ISR[models.ShardID(in.DB, sh.ID)]
	return ok && set.ClusterID != 0 && in.ClusterID != 0 && set.ClusterID != in.ClusterID
}

// PlanLeaders decides, for every shard of one database, whether its leader must
// change: a dead leader is replaced by the live in-sync replica with the most
// recent log (highest max_term, then last_txn_id) at NextTerm; with none the
// shard goes offline; an offline shard comes back when a replica of its last
// in-sync set returns. A shard published at a term below one a live replica
// holds (restored state) is re-elected the same way. When the in-sync record
// itself is stale (isrTrusted), it is ignored: the shard gets a leader only
// once every assigned replica is live and has reported its log, and stays
// offline, naming the missing replicas, until then. It returns the new
// states and the ids of the shards that changed.
func PlanLeaders(in ShardInputs) (models.ShardStates, []int) {
	cur := map[int]models.ShardState{}
	for _, s := range in.States.Shards {
		cur[s.ID] = s
	}
	next := models.ShardStates{DB: in.DB, Shards: make([]models.ShardState, 0, len(in.Assign.Shards))}
	leads := map[string]int{}
	for _, s := range in.States.Shards {
		if s.Status == models.StatusOnline {
			leads[s.Leader]++
		}
	}
	var changed []int
	for _, sh := range in.Assign.Shards {
		st, ok := cur[sh.ID]
		if !ok {
			st = models.ShardState{ID: sh.ID, Status: models.StatusOffline}
		}
		_, leaderLive := in.Live[st.Leader]
		behind := liveTerm(in, sh.ID) > st.Term
		// A leadership at or below a restored set's term is the restored
		// state's own (never checked against the replicas' logs); one above
		// it was decided since, and keeps going until its leader records its
		// set in this cluster.
		restoredLeader := restoredISR(in, sh) && st.Term <= in.ISR[models.ShardID(in.DB, sh.ID)].Term
		healthy := st.Status == models.StatusOnline && leaderLive && slices.Contains(sh.Replicas, st.Leader) && !behind &&
			!restoredLeader
		if healthy {
			next.Shards = append(next.Shards, st)
			continue
		}
		var best, reason string
		if isrTrusted(in, sh) {
			isr := inSync(in, sh)
			best = pickLeader(in, sh, isr, st.Leader, leads)
			reason = fmt.Sprintf("no live in-sync replica; last in-sync set %v", isr)
		} else if missing := notLive(in, sh.Replicas); len(missing) > 0 {
			reason = staleReason(in, sh, missing)
		} else {
			best = pickLeader(in, sh, sh.Replicas, st.Leader, leads)
		}
		ns := st
		if best == "" {
			ns.Status = models.StatusOffline
			ns.Reason = reason
		} else {
			if st.Status == models.StatusOnline {
				leads[st.Leader]--
			}
			leads[best]++
			ns = models.ShardState{ID: sh.ID, Leader: best, Term: NextTerm(in, st), Status: models.StatusOnline}
		}
		if ns != st {
			changed = append(changed, sh.ID)
		}
		next.Shards = append(next.Shards, ns)
	}
	return next, changed
}

// staleReason says why a shard with a stale in-sync record stays offline and
// how an operator can force it.
func staleReason(in ShardInputs, sh models.ShardAssignment, missing []string) string {
	what := "no in-sync set is recorded, but a live replica holds data"
	if set, ok := in.ISR[models.ShardID(in.DB, sh.ID)]; ok {
		what = fmt.Sprintf("the in-sync set on record is of term %d, a live replica holds term %d", set.Term, liveTerm(in, sh.ID))
		if restoredISR(in, sh) {
			what = fmt.Sprintf("the in-sync set on record (term %d) was written in etcd cluster %x, this is %x", set.Term, set.ClusterID, in.ClusterID)
		}
	}
	return fmt.Sprintf("stale in-sync set (%s: the state was restored or edited): "+
		"waiting for every replica to report its log, missing %v; to accept losing the writes only they hold, "+
		"POST /api/v1/databases/%s/shards/%d/leader with {\"node_id\":\"<live replica>\",\"unclean\":true}",
		what, missing, in.DB, sh.ID)
}

// notLive lists the replicas with no live record (in order).
func notLive(in ShardInputs, replicas []string) []string {
	var out []string
	for _, n := range replicas {
		if _, ok := in.Live[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// pickLeader returns the live in-sync replica with the most recent log: the
// highest max_term, then the highest last_txn_id (a replica holding a newer
// term's entries beats a longer tail from an older term, as in Raft); ties go
// to the fewest leaderships, then the node id. "" when none qualifies.
func pickLeader(in ShardInputs, sh models.ShardAssignment, isr []string, old string, leads map[string]int) string {
	id := models.ShardID(in.DB, sh.ID)
	var cands []string
	for _, n := range isr {
		if _, live := in.Live[n]; live && slices.Contains(sh.Replicas, n) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return ""
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if ma, mb := in.Live[a].MaxTerm[id], in.Live[b].MaxTerm[id]; ma != mb {
			return ma > mb
		}
		ta, tb := in.Live[a].LastTxnID[id], in.Live[b].LastTxnID[id]
		if ta != tb {
			return ta > tb
		}
		if leads[a] != leads[b] {
			return leads[a] < leads[b]
		}
		return a < b
	})
	// A draining node leads only when nothing else can.
	for _, c := range cands {
		if _, d := in.Drains[c]; !d {
			return c
		}
	}
	return cands[0]
}
