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
	"strings"

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
	// Answers are the replicas' last txn ids, asked for at failover: shard
	// -> node -> answer. A shard with answers elects only among replicas
	// that answered; one without (nobody asked, or nobody answered in time)
	// ranks its live in-sync replicas by the tie-break alone.
	Answers map[int]map[string]models.ReplicaTxn
	// Leads counts the online leaderships of every node across the cluster,
	// for the tie-break (fewest leaderships): the shards of a dead node then
	// spread over the survivors cluster-wide, not per database. Nil: this
	// database's own. PlanLeaders keeps it up to date as it decides.
	Leads map[string]int
}

// ClusterLeads counts the online leaderships of every node over the
// databases of one storage cluster.
func ClusterLeads(st map[string]models.ShardStates, assign map[string]models.Assignment, cluster string) map[string]int {
	leads := map[string]int{}
	for name, ss := range st {
		if a, ok := assign[name]; !ok || a.Cluster != cluster {
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

// needsLeader reports whether shard sh (current state st, ok when it has
// one) must get a new leader or stay offline: its leader is not an online,
// live replica, or it is published at a term below one a live replica
// already holds in its log (restored state).
func needsLeader(in ShardInputs, sh models.ShardAssignment, st models.ShardState, ok bool) bool {
	if !ok {
		return true
	}
	_, leaderLive := in.Live[st.Leader]
	behind := liveTerm(in, sh.ID) > st.Term
	return !(st.Status == models.StatusOnline && leaderLive && slices.Contains(sh.Replicas, st.Leader)) || behind
}

// liveTerm is the highest term any live node holds in its log of the shard,
// from the node records and from the replicas' answers when asked.
func liveTerm(in ShardInputs, shard int) int64 {
	id := models.ShardID(in.DB, shard)
	var t int64
	for _, n := range in.Live {
		t = max(t, n.MaxTerm[id])
	}
	for _, a := range in.Answers[shard] {
		t = max(t, int64(a.LastTerm), a.Term)
	}
	return t
}

// NextTerm is the term of a new leadership of shard whose published state is
// cur: above the published term and above every term a live replica already
// holds, so terms never go backwards under data (a restored etcd may publish
// a term older than the replicas' logs).
func NextTerm(in ShardInputs, cur models.ShardState) int64 {
	return max(cur.Term, liveTerm(in, cur.ID)) + 1
}

// candidates are the live in-sync replicas of a shard: who may lead it.
func candidates(in ShardInputs, sh models.ShardAssignment) []string {
	return liveReplicas(in, sh, inSync(in, sh))
}

// liveReplicas keeps the nodes of list that are live replicas of sh.
func liveReplicas(in ShardInputs, sh models.ShardAssignment, list []string) []string {
	var out []string
	for _, n := range list {
		if _, live := in.Live[n]; live && slices.Contains(sh.Replicas, n) {
			out = append(out, n)
		}
	}
	return out
}

// inSync returns the shard's last known in-sync set. A shard whose leader never
// published one (no data written yet) counts all its replicas as in sync: they
// are all empty and equal.
func inSync(in ShardInputs, sh models.ShardAssignment) []string {
	if set, ok := in.ISR[models.ShardID(in.DB, sh.ID)]; ok {
		return set.Replicas
	}
	return sh.Replicas
}

// PlanLeaders decides, for every shard of one database, whether its leader must
// change: a dead leader is replaced by the live in-sync replica with the most
// recent log (highest last term, then last_txn_id) at NextTerm; with none the
// shard goes offline; an offline shard comes back when a replica of its last
// in-sync set returns. A shard published at a term below one a live replica
// holds (restored state) is re-elected the same way. It returns the new
// states and the ids of the shards that changed.
func PlanLeaders(in ShardInputs) (models.ShardStates, []int) {
	cur := map[int]models.ShardState{}
	for _, s := range in.States.Shards {
		cur[s.ID] = s
	}
	next := models.ShardStates{DB: in.DB, Shards: make([]models.ShardState, 0, len(in.Assign.Shards))}
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
	for _, sh := range in.Assign.Shards {
		st, ok := cur[sh.ID]
		if !needsLeader(in, sh, st, ok) {
			next.Shards = append(next.Shards, st)
			continue
		}
		if !ok {
			st = models.ShardState{ID: sh.ID, Status: models.StatusOffline}
		}
		isr := inSync(in, sh)
		best, why := pickLeader(in, sh.ID, candidates(in, sh), leads)
		ns := st
		if best == "" {
			ns.Status = models.StatusOffline
			ns.Reason = fmt.Sprintf("no live in-sync replica; last in-sync set %v", isr)
		} else {
			if st.Status == models.StatusOnline {
				leads[st.Leader]--
			}
			leads[best]++
			ns = models.ShardState{ID: sh.ID, Leader: best, Term: NextTerm(in, st), Status: models.StatusOnline, Reason: why}
		}
		if ns != st {
			changed = append(changed, sh.ID)
		}
		next.Shards = append(next.Shards, ns)
	}
	return next, changed
}

// pickLeader returns the live in-sync replica with the most recent log: the
// highest last term (a replica holding a newer term's entries beats a longer
// tail from an older term, as in Raft), then the highest last_txn_id; ties go
// to the fewest leaderships, then the node id. It also says why; "" when none
// qualifies. Where the replicas were asked, only those that answered compete;
// the terms come from their answers, else from their records' max_term.
func pickLeader(in ShardInputs, shard int, cands []string, leads map[string]int) (string, string) {
	if len(cands) == 0 {
		return "", ""
	}
	all := slices.Clone(cands)
	answers := in.Answers[shard]
	var answered []string
	for _, c := range cands {
		if _, ok := answers[c]; ok {
			answered = append(answered, c)
		}
	}
	if len(answered) > 0 {
		cands = answered
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
	best := cands[0]
	// A draining node leads only when nothing else can.
	for _, c := range cands {
		if _, d := in.Drains[c]; !d {
			best = c
			break
		}
	}
	return best, failoverReason(in, shard, all, best, answered)
}

// failoverReason says how a leader was chosen: each candidate's answer (or
// its silence) and the rule that decided.
func failoverReason(in ShardInputs, shard int, cands []string, best string, answered []string) string {
	if in.Answers == nil {
		return fmt.Sprintf("leader %s from live in-sync replicas %v", best, cands)
	}
	var b strings.Builder
	b.WriteString("last_txn_id:")
	for _, c := range cands {
		if a, ok := in.Answers[shard][c]; ok {
			fmt.Fprintf(&b, " %s=%d@%d", c, a.LastTxnID, a.LastTerm)
		} else {
			fmt.Fprintf(&b, " %s=no answer", c)
		}
	}
	if len(answered) == 0 {
		fmt.Fprintf(&b, "; none answered, leader %s by tie-break", best)
	} else {
		fmt.Fprintf(&b, "; leader %s (highest last_txn_id, then fewest leaderships, then node id)", best)
	}
	return b.String()
}

// lastTerm is the term of the last entry in node's log of shard: its answer
// when it was asked, else its record's max_term.
func lastTerm(in ShardInputs, shard int, node string) int64 {
	if a, ok := in.Answers[shard][node]; ok {
		return int64(a.LastTerm)
	}
	return in.Live[node].MaxTerm[models.ShardID(in.DB, shard)]
}

// lastTxn is node's last txn id of shard: its answer when it was asked, else
// what an older node's record still carries (records no longer do).
func lastTxn(in ShardInputs, shard int, node string) uint64 {
	if a, ok := in.Answers[shard][node]; ok {
		return a.LastTxnID
	}
	return in.Live[node].LastTxnID[models.ShardID(in.DB, shard)]
}
