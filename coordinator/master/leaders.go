// Package master is the elected master's work: it turns database configs into
// shard assignments (through placement), publishes shard leaders and terms,
// fails leadership over when storage nodes die, and moves replicas for drains,
// replica-factor changes and rebalancing. Decisions are pure: Schedule
// (schedule.go) maps a state snapshot and the time to operators, data that is
// shown by the API and persisted under NS/operators/ while it runs
// (operator.go); the executor (rebalance.go, reconcile.go) performs each
// operator's next step as one fenced txn while the term lasts.
package master

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// ShardInputs is what a leader decision reads about one database.
type ShardInputs struct {
	DB     string
	Assign models.Assignment
	States models.ShardStates
	Live   statemachine.Map[models.StorageNode] // live storage nodes of the database's cluster
	ISR    statemachine.Map[models.ISR]         // cluster's in-sync sets by shard id
	Drains map[string]models.Drain
	// Answers are the replicas' last txn ids, asked for at failover: shard
	// -> node -> answer. A shard with answers elects only among replicas
	// that answered; one without (nobody asked, or nobody answered in time)
	// ranks its live in-sync replicas by the tie-break alone.
	Answers map[int]map[string]models.ReplicaTxn
	// ClusterID is the etcd cluster the in-sync sets were listed from (0:
	// unknown): a set written in another one was restored from a backup.
	ClusterID uint64
	// Leads counts the online leaderships of every node across the cluster,
	// for the tie-break (fewest leaderships): the shards of a dead node then
	// spread over the survivors cluster-wide, not per database. Nil: this
	// database's own. PlanLeaders keeps it up to date as it decides.
	Leads map[string]int
	// Moved are live nodes that registered again at another address since
	// the shards were last published (moves.go): each online shard they
	// are a replica of gets a new leadership, chosen by the usual rule.
	Moved map[string]bool
	// RecordedTerms is, per shard id, the highest max_term of the live
	// nodes' records, computed once for the cluster (nil: read from Live
	// for each shard, O(nodes) each).
	RecordedTerms map[string]int64
	// SeenTerms is, per shard id, the highest seen_term of the live nodes'
	// records, computed with RecordedTerms (nil: read from Live for each
	// shard, O(nodes) each: at 1,000 nodes x 32,000 shards that was most
	// of an idle master's second).
	SeenTerms map[string]int64
	// Restored is, when not nil, exactly the shard ids whose in-sync
	// record in ISR was written in another etcd cluster than ClusterID
	// (restoredISR), computed once per version of ISR: the check then
	// costs no lookup of ISR (a whole domain's failover checked ~32,000
	// shards a pass, most of it in those lookups). Nil: looked up.
	Restored map[string]bool
	// terms is, when not nil, RecordedTerms and SeenTerms of this
	// database's shards by shard number (liveTerms, computed once per
	// version of the cluster's live nodes); read before them.
	terms *dbTerms
	// view is the shards that need a leader, computed once in a failover
	// pass (withView); nil, or computed from other inputs: computed where
	// read.
	view *passView
}

// ClusterLeads counts the online leaderships of every node over the
// databases of one storage cluster.
func ClusterLeads(st statemachine.Map[models.ShardStates], assign statemachine.Map[models.Assignment], cluster string) map[string]int {
	leads := map[string]int{}
	for name, ss := range st.All() {
		if a, ok := assign.Get(name); !ok || a.Cluster != cluster {
			continue
		}
		for _, s := range ss.Shards {
			if s.Status == models.StatusOnline {
				leads[s.Leader]++
			}
		}
	}
	return leads
}

// replaceAt is the test of an online shard led by a live replica, with its
// id and its live term given; each test in turn, the cheapest first.
func replaceAt(in ShardInputs, sh models.ShardAssignment, st models.ShardState, id string, term int64) bool {
	if term > st.Term { // behind
		return true
	}
	// A leadership at or below a restored set's term is the restored state's
	// own (never checked against the replicas' logs); one above it was
	// decided since, and keeps going until its leader records its set here.
	if restoredID(in, id) && st.Term <= in.ISR.At(id).Term {
		return true
	}
	return movedReplica(in, sh, st)
}

// liveTerm is the highest term any live node holds in its log of the shard
// or has accepted (led or followed at: seen_term), from the node records and
// from the replicas' answers when asked. A leadership that wrote nothing
// leaves no entry in any log, but its replicas remember its term.
func liveTerm(in ShardInputs, shard int) int64 {
	return liveTermOf(in, shard, models.ShardID(in.DB, shard))
}

// liveTermOf is liveTerm with the shard's id (models.ShardID) given.
func liveTermOf(in ShardInputs, shard int, id string) int64 {
	return max(recordsTermOf(in, shard, id), answersTermOf(in, shard))
}

// recordedTermOf is the highest term any live node's record says it holds
// in its log of the shard id (max_term): what the trust in an in-sync
// record is judged by, the same before and after the replicas are asked.
func recordedTermOf(in ShardInputs, shard int, id string) int64 {
	if in.terms != nil {
		return in.terms.of(shard, id).rec
	}
	if in.RecordedTerms != nil {
		return in.RecordedTerms[id]
	}
	var t int64
	for _, n := range in.Live.All() {
		t = max(t, n.MaxTerm[id])
	}
	return t
}

// NextTerm is the term of a new leadership of shard whose published state is
// cur: above the published term and above every term a live replica already
// holds in its log or has accepted, so a term is never handed out twice (a
// restored etcd may publish a term older than the replicas' logs, or than a
// leadership that wrote nothing). Every new leadership (failover, restore
// adoption, transfer, spreading, a moved node) takes its term from here.
func NextTerm(in ShardInputs, cur models.ShardState) int64 {
	return max(cur.Term, liveTerm(in, cur.ID)) + 1
}

// candidatesOf are who may lead a shard, its record looked up (viewOf):
// its live in-sync replicas; with a stale in-sync record (isrTrusted), every
// replica, and only once all of them are live (none is then missing).
func candidatesOf(in ShardInputs, sh models.ShardAssignment, v isrView) (cands, missing []string) {
	if v.trusted {
		return liveReplicas(in, sh, v.inSync(sh)), nil
	}
	if missing = notLive(in, sh.Replicas); len(missing) > 0 {
		return nil, missing
	}
	return slices.Clone(sh.Replicas), nil
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
	return viewOf(in, sh).trusted
}

// isrView is what the rules read of one shard's in-sync record, looked up
// once: the record (ok when there is one), whether it is a restored copy
// (restoredISR) and whether it can be believed (isrTrusted).
type isrView struct {
	set      models.ISR
	ok       bool
	restored bool
	trusted  bool
}

// viewOf looks the shard's in-sync record up and judges it.
func viewOf(in ShardInputs, sh models.ShardAssignment) isrView {
	return viewOfID(in, sh.ID, models.ShardID(in.DB, sh.ID))
}

// viewOfID is viewOf with the shard's id given.
func viewOfID(in ShardInputs, shard int, id string) isrView {
	lt := recordedTermOf(in, shard, id)
	set, ok := in.ISR.Get(id)
	if !ok {
		return isrView{trusted: lt == 0}
	}
	restored := restoredSet(in, set)
	return isrView{set: set, ok: true, restored: restored, trusted: set.Term >= lt && !restored}
}

// inSync is inSync(in, sh) for the shard's looked up record.
func (v isrView) inSync(sh models.ShardAssignment) []string {
	switch {
	case !v.trusted:
		return nil
	case v.ok:
		return v.set.Replicas
	}
	return sh.Replicas
}

// restoredISR: the shard's in-sync record was written in another etcd
// cluster than the one it was read from, so it is a restored copy. Even with
// no live replica proving it stale, a replica listed in it may have fallen
// behind since the backup (its log then holds no newer term), and a live
// leader of the restored state may be that replica.
func restoredISR(in ShardInputs, sh models.ShardAssignment) bool {
	return restoredID(in, models.ShardID(in.DB, sh.ID))
}

// restoredID is restoredISR for the shard id given: no lookup when the
// cluster is unknown, or when in.Restored already says.
func restoredID(in ShardInputs, id string) bool {
	switch {
	case in.ClusterID == 0:
		return false
	case in.Restored != nil:
		return in.Restored[id]
	}
	set, ok := in.ISR.Get(id)
	return ok && restoredSet(in, set)
}

// restoredSet: set, the record of a shard of in, was written in another
// etcd cluster than the one it was read from.
func restoredSet(in ShardInputs, set models.ISR) bool {
	return set.ClusterID != 0 && in.ClusterID != 0 && set.ClusterID != in.ClusterID
}

// staleReason says why a shard with a stale in-sync record stays offline and
// how an operator can force it.
func staleReason(in ShardInputs, sh models.ShardAssignment, missing []string) string {
	what := "no in-sync set is recorded, but a live replica holds data"
	if set, ok := in.ISR.Get(models.ShardID(in.DB, sh.ID)); ok {
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
		if _, ok := in.Live.Get(n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// liveReplicas keeps the nodes of list that are live replicas of sh.
func liveReplicas(in ShardInputs, sh models.ShardAssignment, list []string) []string {
	var out []string
	for _, n := range list {
		if _, live := in.Live.Get(n); live && slices.Contains(sh.Replicas, n) {
			out = append(out, n)
		}
	}
	return out
}

// inSync returns the shard's last known in-sync set. A shard whose leader never
// published one (no data written yet) counts all its replicas as in sync: they
// are all empty and equal. A stale record (isrTrusted) vouches for nobody.
func inSync(in ShardInputs, sh models.ShardAssignment) []string {
	return viewOf(in, sh).inSync(sh)
}

// PlanLeaders decides, for every shard of one database, whether its leader must
// change: a dead leader is replaced by the live in-sync replica with the most
// recent log (highest last term, then last_txn_id) at NextTerm; with none the
// shard goes offline; an offline shard comes back when a replica of its last
// in-sync set returns. A shard published at a term below one a live replica
// holds (restored state) is re-elected the same way. When the in-sync record
// itself is stale (isrTrusted), it is ignored: the shard gets a leader only
// once every assigned replica is live and has reported its log, and stays
// offline, naming the missing replicas, until then. It returns the new
// states and the ids of the shards that changed.
func PlanLeaders(in ShardInputs) (models.ShardStates, []int) {
	next := models.ShardStates{DB: in.DB, Shards: make([]models.ShardState, 0, len(in.Assign.Shards)), UID: in.States.UID}
	leads := in.Leads
	if leads == nil {
		leads = map[string]int{}
		for _, s := range in.States.Shards {
			if s.Status == models.StatusOnline {
				leads[s.Leader]++
			}
		}
	}
	var changed []int
	need := in.needs()
	for i, sh := range in.Assign.Shards {
		var n shardNeed
		switch {
		case len(need) > 0 && need[0].at == i:
			n, need = need[0], need[1:]
		case len(in.Answers[sh.ID]) > 0:
			// asked about although its view said it needed no leader: an
			// answer above its published term makes it need one
			var ok bool
			if n, ok = needOf(in, i, sh); !ok {
				next.Shards = append(next.Shards, n.st)
				continue
			}
		default:
			st, _ := shardStateOf(in.States, sh.ID)
			next.Shards = append(next.Shards, st)
			continue
		}
		st, ok, v, missing := n.st, n.ok, n.v, n.missing
		if !ok {
			st = models.ShardState{ID: sh.ID, Status: models.StatusOffline}
		}
		cands, movedWait := movedCandidates(in, sh, n.cands)
		var best, why string
		switch {
		case len(missing) > 0:
			why = staleReason(in, sh, missing)
		case movedWait != "":
			why = movedWait
		case !v.trusted && in.Answers != nil && len(unanswered(in, sh.ID, cands)) > 0:
			// A stale set: every replica's log must be known, so the one
			// holding the acknowledged writes is not passed over.
			why = staleReason(in, sh, unanswered(in, sh.ID, cands))
		default:
			best, why = pickLeader(in, sh.ID, cands, leads)
			if best == "" {
				why = fmt.Sprintf("no live in-sync replica; last in-sync set %v", v.inSync(sh))
			}
			if best != "" && !n.mustReplace(in) && !in.Live.At(best).Writable() {
				// Only fenced, and no replica that takes writes answered:
				// the leadership stays as it is (no new term, no move to
				// another fenced node).
				next.Shards = append(next.Shards, st)
				continue
			}
		}
		ns := st
		if best == "" {
			ns.Status = models.StatusOffline
			ns.Reason = why
		} else {
			if st.Status == models.StatusOnline {
				leads[st.Leader]--
			}
			leads[best]++
			ns = models.ShardState{ID: sh.ID, Leader: best, Term: max(st.Term, n.liveTerm(in)) + 1, Status: models.StatusOnline, Reason: why}
		}
		if ns != st {
			changed = append(changed, sh.ID)
		}
		next.Shards = append(next.Shards, ns)
	}
	return next, changed
}

// shardStateOf is the state of shard id in ss (the last one listed, should ids
// repeat), found at its index where states are kept in shard order.
func shardStateOf(ss models.ShardStates, id int) (models.ShardState, bool) {
	if id >= 0 && id < len(ss.Shards) && ss.Shards[id].ID == id && (id == len(ss.Shards)-1 || !slices.ContainsFunc(ss.Shards[id+1:], func(s models.ShardState) bool { return s.ID == id })) {
		return ss.Shards[id], true
	}
	for i := len(ss.Shards) - 1; i >= 0; i-- {
		if ss.Shards[i].ID == id {
			return ss.Shards[i], true
		}
	}
	return models.ShardState{}, false
}

// pickLeader returns the live in-sync replica with the most recent log: the
// highest last term (a replica holding a newer term's entries beats a longer
// tail from an older term, as in Raft), then the highest last_txn_id; ties go
// to the fewest leaderships, then the node id. It also says why; "" when none
// qualifies. Where the replicas were asked, only those that answered compete
// (unless a silent one's record shows a newer term than every answer:
// silentNewer); the terms come from their answers, else from their records'
// max_term.
func pickLeader(in ShardInputs, shard int, cands []string, leads map[string]int) (string, string) {
	if len(cands) == 0 {
		return "", ""
	}
	all := cands // cands may be a pass's view: not changed, the ranking sorts a copy
	answers := in.Answers[shard]
	var answered []string
	for _, c := range cands {
		if _, ok := answers[c]; ok {
			answered = append(answered, c)
		}
	}
	if len(answered) > 0 && !silentNewer(in, shard, cands, answered) {
		cands = answered
	} else {
		cands = slices.Clone(cands)
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if ma, mb := lastTerm(in, shard, a), lastTerm(in, shard, b); ma != mb {
			return ma > mb
		}
		ta, tb := lastTxn(in, shard, a), lastTxn(in, shard, b)
		if ta != tb {
			return ta > tb
		}
		if leads[a] != leads[b] {
			return leads[a] < leads[b]
		}
		return a < b
	})
	best := preferred(in, cands)
	return best, failoverReason(in, shard, all, best, answered)
}

// silentNewer: a candidate that did not answer holds, by its record's
// max_term, a newer term than every answer. Answering alone does not then
// make a candidate lead: a wiped replica (same node id, empty data dir)
// still listed in a trusted set answers last term 0 at once, and a round
// ended at its patience (gatherTxn) must not hand it the shard over
// the members holding the data. All of them then compete, the silent ones
// ranked by their records.
func silentNewer(in ShardInputs, shard int, cands, answered []string) bool {
	var best int64 = -1
	for _, c := range answered {
		best = max(best, lastTerm(in, shard, c))
	}
	for _, c := range cands {
		if _, ok := in.Answers[shard][c]; !ok && lastTerm(in, shard, c) > best {
			return true
		}
	}
	return false
}

// preferred is the first of the ranked candidates that takes writes and is
// not draining; else the first that takes writes (a draining node leads only
// when nothing else can); else the first not draining, else the first (a
// node that cannot accept writes leads only when none can: it answers 507
// until its disk heals).
func preferred(in ShardInputs, ranked []string) string {
	writable := func(c string) bool { return in.Live.At(c).Writable() }
	for _, ok := range []func(string) bool{
		func(c string) bool { _, d := in.Drains[c]; return writable(c) && !d },
		writable,
		func(c string) bool { _, d := in.Drains[c]; return !d },
	} {
		if i := slices.IndexFunc(ranked, ok); i >= 0 {
			return ranked[i]
		}
	}
	return ranked[0]
}

// failoverReason says how a leader was chosen: each candidate's answer (or
// its silence) and the rule that decided.
func failoverReason(in ShardInputs, shard int, cands []string, best string, answered []string) string {
	if in.Answers == nil {
		return fmt.Sprintf("leader %s from live in-sync replicas %v", best, cands)
	}
	b := make([]byte, 0, 128)
	b = append(b, "last_txn_id:"...)
	for _, c := range cands {
		b = append(append(append(b, ' '), c...), '=')
		if a, ok := in.Answers[shard][c]; ok {
			b = append(strconv.AppendUint(b, a.LastTxnID, 10), '@')
			b = strconv.AppendUint(b, uint64(a.LastTerm), 10)
		} else {
			b = append(b, "no answer"...)
		}
	}
	if len(answered) == 0 {
		b = append(append(append(b, "; none answered, leader "...), best...), " by tie-break"...)
	} else {
		b = append(append(append(b, "; leader "...), best...), " (highest last_txn_id, then fewest leaderships, then node id)"...)
	}
	return string(b)
}

// lastTerm is the term of the last entry in node's log of shard: its answer
// when it was asked, else its record's max_term.
func lastTerm(in ShardInputs, shard int, node string) int64 {
	if a, ok := in.Answers[shard][node]; ok {
		return int64(a.LastTerm)
	}
	return in.Live.At(node).MaxTerm[models.ShardID(in.DB, shard)]
}

// lastTxn is node's last txn id of shard: its answer when it was asked, else
// what an older node's record still carries (records no longer do).
func lastTxn(in ShardInputs, shard int, node string) uint64 {
	if a, ok := in.Answers[shard][node]; ok {
		return a.LastTxnID
	}
	return in.Live.At(node).LastTxnID[models.ShardID(in.DB, shard)]
}

// unanswered lists the candidates that did not answer the failover question.
func unanswered(in ShardInputs, shard int, cands []string) []string {
	var out []string
	for _, c := range cands {
		if _, ok := in.Answers[shard][c]; !ok {
			out = append(out, c)
		}
	}
	return out
}
