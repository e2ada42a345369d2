package master

import (
	"math"
	"reflect"
	"slices"
	"unsafe"

	"github.com/cairn-db/cairn/models"
)

// passView is what a failover pass reads of one database's shards that
// need a leader, computed once from its inputs (withView) and shared by
// the check, the round's questions (newRound) and the decisions
// (PlanLeaders). Each of those evaluated the need (needOf), the in-sync record
// (viewOf) and the live term (liveTermOf) of the same shards again: ~6-7
// µs a shard each, ~10,600 shards after a dead domain's leases end at
// 1,000 nodes, all of it the master's CPU between the last lease and the
// new leaders. It holds what the records say; the replicas' answers, asked
// for after it is computed, are added where they are read.
type passView struct {
	from ShardInputs // the inputs it was computed from, without Answers and Leads
	need []shardNeed
}

// shardNeed is one shard that needs a leader, as its inputs say.
type shardNeed struct {
	at    int // index in Assign.Shards
	sh    models.ShardAssignment
	st    models.ShardState
	ok    bool // st is published
	id    string
	term  int64 // liveTermOf without the answers: the live records' max_term and seen_term
	v     isrView
	cands []string // candidatesOf; read only
	// missing are the replicas a stale set waits for (candidatesOf).
	missing []string
	// replace is mustReplace without the answers.
	replace bool
}

// withView is in with its shards that need a leader computed (passView),
// and whether there are any (a database with none keeps no view).
func withView(in ShardInputs) (ShardInputs, bool) {
	need := needsOf(in)
	if len(need) == 0 {
		return in, false
	}
	from := in
	from.Answers, from.Leads, from.view = nil, nil, nil
	in.view = &passView{from: from, need: need}
	return in, true
}

// needs are the shards of in that need a leader: its view's when the view
// was computed from these inputs (the same snapshots, maps and slices; the
// answers and leads aside), else computed now. A view never outlives the
// inputs it was read from: a pass whose inputs change computes a new one.
func (in ShardInputs) needs() []shardNeed {
	if in.view != nil && in.view.of(in) {
		return in.view.need
	}
	return needsOf(in)
}

// of: the view was computed from in (answers and leads aside).
func (pv *passView) of(in ShardInputs) bool {
	f := pv.from
	return f.DB == in.DB && f.ClusterID == in.ClusterID &&
		sameSlice(f.Assign.Shards, in.Assign.Shards) && f.Assign.Cluster == in.Assign.Cluster &&
		sameSlice(f.States.Shards, in.States.Shards) && f.States.UID == in.States.UID &&
		f.Live.Same(in.Live) && f.ISR.Same(in.ISR) &&
		sameMap(f.Drains, in.Drains) && sameMap(f.Moved, in.Moved) && sameMap(f.RecordedTerms, in.RecordedTerms) &&
		sameMap(f.SeenTerms, in.SeenTerms) && f.terms == in.terms && sameMap(f.Restored, in.Restored)
}

// needsOf computes the shards of in that need a leader (needOf).
// The list is gathered on the stack and kept at its size: a dead domain's
// pass lists ~10,700 of them, and growing each database's list by append
// doubled the pass's allocated bytes.
func needsOf(in ShardInputs) []shardNeed {
	var buf [32]shardNeed
	out := buf[:0]
	for i, sh := range in.Assign.Shards {
		if n, ok := needOf(in, i, sh); ok {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return slices.Clone(out)
}

// needOf reports whether the shard at index i of in.Assign.Shards must get
// a new leader or stay offline, with what the rules read of
// it when it must: its record looked up once, its id made once; its state
// is in n either way. It must when its leader is not an online, live
// replica, or it is published at a term below one a live replica already
// holds in its log or an answer shows (restored state), or it cannot accept
// writes (fencedLeader: its live leader fenced itself off writes, a disk
// fault in its record, and a live in-sync replica that takes writes can
// lead instead; with none, RF 1 or every replica fenced, the leader stays:
// it answers 507 at once and takes writes again once its disk does, where
// an offline shard would only answer 503 after the write timeout).
func needOf(in ShardInputs, i int, sh models.ShardAssignment) (shardNeed, bool) {
	st, ok := shardStateOf(in.States, sh.ID)
	id := models.ShardID(in.DB, sh.ID)
	n := shardNeed{at: i, sh: sh, st: st, ok: ok, id: id, term: recordsTermOf(in, sh.ID, id), replace: true}
	var leader models.StorageNode
	live := false
	if ok {
		leader, live = in.Live.Get(st.Leader)
		if st.Status == models.StatusOnline && live && slices.Contains(sh.Replicas, st.Leader) {
			n.replace = replaceAt(in, sh, st, id, n.term)
		}
	}
	fencedLeader := ok && live && !leader.Writable()
	if !n.replace && !fencedLeader && !(ok && n.answersAbove(in)) {
		return n, false
	}
	n.v = viewOfID(in, sh.ID, id)
	n.cands, n.missing = candidatesOf(in, sh, n.v)
	if n.mustReplace(in) {
		return n, true
	}
	// fencedLeader: some candidate takes writes
	for _, c := range n.cands {
		if in.Live.At(c).Writable() {
			return n, true
		}
	}
	return n, false
}

// mustReplace: the shard needs a leader even were its leader not fenced
// (the answers in in counted).
func (n shardNeed) mustReplace(in ShardInputs) bool {
	return !n.ok || n.replace || n.answersAbove(in)
}

// answersAbove: a replica's answer holds or has accepted a term above the
// published one.
func (n shardNeed) answersAbove(in ShardInputs) bool {
	return answersTermOf(in, n.sh.ID) > n.st.Term
}

// liveTerm is liveTermOf(in, shard, id) (NextTerm's).
func (n shardNeed) liveTerm(in ShardInputs) int64 {
	return max(n.term, answersTermOf(in, n.sh.ID))
}

// behind: the shard has no published state, or a live
// replica's record holds or has accepted a term above the published one (a
// restored or rolled back state): NextTerm must then hear the replicas'
// answers, so its round keeps the full timeout.
func (n shardNeed) behind(in ShardInputs) bool {
	return !n.ok || n.liveTerm(in) > n.st.Term
}

// recordsTermOf is liveTermOf without the answers: the highest term a live
// node's record holds in its log of shard id or has accepted.
func recordsTermOf(in ShardInputs, shard int, id string) int64 {
	if in.terms != nil {
		return in.terms.of(shard, id).both
	}
	t := recordedTermOf(in, shard, id)
	if in.SeenTerms != nil {
		return max(t, in.SeenTerms[id])
	}
	for _, n := range in.Live.All() {
		t = max(t, n.SeenTerm[id])
	}
	return t
}

// answersTermOf is the highest term the replicas' answers about shard hold
// or have accepted (0: none).
func answersTermOf(in ShardInputs, shard int) int64 {
	var t int64
	for _, a := range in.Answers[shard] {
		t = max(t, int64(min(a.LastTerm, math.MaxInt64)), a.Term, a.SeenTerm)
	}
	return t
}

// sameSlice: a and b are the same slice (not equal ones: the same array).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// sameMap: a and b are the same map.
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
