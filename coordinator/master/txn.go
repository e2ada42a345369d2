package master

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// AskTxnFunc asks the storage node node for the last txn ids of its
// replicas of db's shards (one request for all of them).
type AskTxnFunc func(ctx context.Context, node models.NodeRef, db string, shards []int) (map[int]models.ReplicaTxn, error)

// AskTxnsFunc asks the storage node node, in one request, for the last txn
// ids of its replicas of the shards of many databases (database -> shard
// numbers). A node that does not serve the batched question (an older
// release during a rolling upgrade) fails it with an error wrapping
// ErrNoBatch, and is then asked per database (AskTxnFunc).
type AskTxnsFunc func(ctx context.Context, node models.NodeRef, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error)

// ErrNoBatch: the storage node does not serve the batched last txn question.
var ErrNoBatch = errors.New("master: the node does not answer the batched last txn question")

// maxAskers bounds the questions of one failover round in flight at once:
// a node's question costs the master one connection. A whole failure
// domain lost at 1,000 nodes leaves ~670 nodes to ask, all at once: with
// 256 at a time, slow answers held the slots, the rest went out late with
// a whole timeout each or were not sent at all, and the round took ~1 s
// (two timeouts) where every node answered within one when asked together.
const maxAskers = 1024

// needingLeader yields the shards of in that must get a new leader or stay
// offline (needOf).
func needingLeader(in ShardInputs) iter.Seq[models.ShardAssignment] {
	return func(yield func(models.ShardAssignment) bool) {
		for _, n := range in.needs() {
			if !yield(n.sh) {
				return
			}
		}
	}
}

// round is one failover round's questions: for every live node that is an
// in-sync replica of a shard needing a leader, those shards, of every
// database of the round.
type round struct {
	ins    []ShardInputs
	byNode map[models.NodeRef]map[string][]int // node -> db -> shards
	// out is what gatherTxn returns: per input, shard -> node -> answer;
	// every asked shard has its (empty) map before any question goes out
	// (silence then counts), the askers only fill them, under mu.
	out []map[int]map[string]models.ReplicaTxn
	at  map[string]int // db -> index in ins
	// stale: some shard of the round has an in-sync set that cannot be
	// believed (isrTrusted: stale or restored); the round then hears
	// every replica it can within the full timeout.
	stale bool
	// bounded: the round ends at the trusted patience; late counts the
	// nodes it ended without (logged once, not per node: ~666 warnings).
	bounded bool
	late    int
	// settled lists the nodes some answer was recorded from or whose
	// failure was logged before the round ended (the rest are late);
	// closed: the round ended, and an answer arriving after is dropped
	// (gatherTxn has handed out).
	settled map[string]bool
	closed  bool
	mu      sync.Mutex
}

// newRound lists the questions of a failover round over ins.
func newRound(ins []ShardInputs) *round {
	r := &round{ins: ins, byNode: map[models.NodeRef]map[string][]int{},
		out: make([]map[int]map[string]models.ReplicaTxn, len(ins)), at: make(map[string]int, len(ins))}
	for i, in := range ins {
		r.at[in.DB] = i
		for _, need := range in.needs() {
			sh := need.sh
			r.stale = r.stale || !need.v.trusted || need.behind(in)
			for _, n := range need.cands {
				ref := models.NodeRef{NodeID: n, Address: in.Live.At(n).NodeAddress}
				if r.byNode[ref] == nil {
					r.byNode[ref] = map[string][]int{}
				}
				r.byNode[ref][in.DB] = append(r.byNode[ref][in.DB], sh.ID)
				if r.out[i] == nil {
					r.out[i] = map[int]map[string]models.ReplicaTxn{}
				}
				if r.out[i][sh.ID] == nil {
					r.out[i][sh.ID] = map[string]models.ReplicaTxn{}
				}
			}
		}
	}
	return r
}

// gatherTxn asks the live in-sync replicas of every shard of ins that needs
// a new leader for their last txn id: one batched request per node for the
// whole round (a node of an older release is asked per database instead),
// at most maxAskers nodes at once. Each question has timeout from when it
// is sent, and a question not sent within timeout of the round's start is
// not sent (so a round lasts at most twice timeout, and a node asked late
// still has its whole timeout: a shared deadline cut the last of many
// nodes short). Nodes that fail or do not answer in time are left out of
// this round's answers (the decision skips them; the next round asks them
// again). The answers feed PlanLeaders, which stays a pure function of
// them. Per input: nil when none of its shards needs a leader or nobody can
// be asked.
//
// A round whose every shard has a trusted in-sync set (isrTrusted) and a
// published term no live record is above (shardNeed.behind) ends patience
// after it starts, answers or not (patience 0, or not below timeout: no
// such bound). Such a set's
// members all hold every acknowledged write: the storage leader counts a
// write acknowledged only once every member of its set (and every follower
// joining it) holds it (storage/replica.go, awaitAcks), adds a follower
// only once it holds every acknowledged entry (storage/isr.go, decideISR:
// acked >= committed) and persists a shrink in etcd before the removed
// member stops counting (storage/replica.go, maintainISR: persistISRBatched
// before ls.isr = next). Any member may then lead without losing an
// acknowledged write; the answers only rank the unacknowledged tail and
// show who is alive, and a shard nobody answered for in time is led by its
// records' max_term (pickLeader). A wiped replica (same node id, empty data
// dir) breaks the rule while it is still listed: its answer (last term 0)
// and its record (no max_term) rank it below every member holding data,
// and pickLeader does not let it win alone on having answered when a
// silent member's record shows a newer term. A stale or restored set must
// hear every replica (PlanLeaders waits for the silent ones), so a round
// with any keeps the full timeout. At 1,000 simulated nodes the agents'
// process answers a dead domain's ~666 questions in one burst 0.4-0.5 s
// into the round, whatever the order of the answers.
func gatherTxn(ctx context.Context, ask AskTxnFunc, asks AskTxnsFunc, timeout, patience time.Duration, ins []ShardInputs, lg *zap.Logger) []map[int]map[string]models.ReplicaTxn {
	if ask == nil && asks == nil {
		return make([]map[int]map[string]models.ReplicaTxn, len(ins))
	}
	r := newRound(ins)
	r.bounded = !r.stale && patience > 0 && patience < timeout && len(r.byNode) > 0
	if r.bounded {
		// Every question's deadline is the round's: cut together.
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, patience)
		defer stop()
	}
	start, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxAskers)
	nodes := slices.SortedFunc(maps.Keys(r.byNode), cmpNodeRef)
	asked := 0
	for i, node := range nodes {
		select {
		case sem <- struct{}{}:
		case <-start.Done():
		}
		if start.Err() != nil {
			lg.Warn("the failover round's deadline passed before these replicas were asked; skipped this round",
				zap.Int("nodes", len(nodes)-i), zap.Duration("timeout", timeout))
			break
		}
		wg.Add(1)
		asked++
		go func() {
			defer func() { <-sem; wg.Done() }()
			qctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r.askNode(qctx, ask, asks, node, lg)
		}()
	}
	r.wait(ctx, &wg, asked)
	if r.late > 0 {
		lg.Info("the failover round's in-sync sets are all trusted: it ended at its patience without these answers",
			zap.Int("questions", r.late), zap.Int("nodes", len(nodes)), zap.Duration("patience", patience))
	}
	for i, in := range ins {
		if r.out[i] != nil {
			lg.Info("failover answers", zap.String("db", in.DB), zap.Object("last_txn_ids", answersLog(r.out[i])))
		}
	}
	return r.out
}

// answersLog logs a database's failover answers (shard -> node -> answer)
// field by field, shards and nodes in order: the same fields zap.Any wrote
// through reflection and encoding/json, at ~40 ms a whole domain's failover
// at the info level.
type answersLog map[int]map[string]models.ReplicaTxn

func (a answersLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for _, id := range slices.Sorted(maps.Keys(a)) {
		if err := enc.AddObject(strconv.Itoa(id), nodeAnswersLog(a[id])); err != nil {
			return err
		}
	}
	return nil
}

// nodeAnswersLog logs one shard's answers, by node.
type nodeAnswersLog map[string]models.ReplicaTxn

func (a nodeAnswersLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for _, n := range slices.Sorted(maps.Keys(a)) {
		if err := enc.AddObject(n, replicaTxnLog(a[n])); err != nil {
			return err
		}
	}
	return nil
}

// replicaTxnLog logs one answer under its JSON names.
type replicaTxnLog models.ReplicaTxn

func (r replicaTxnLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddUint64("last_txn_id", r.LastTxnID)
	enc.AddUint64("last_term", r.LastTerm)
	enc.AddInt64("term", r.Term)
	if r.SeenTerm != 0 {
		enc.AddInt64("seen_term", r.SeenTerm)
	}
	return nil
}

func cmpNodeRef(a, b models.NodeRef) int {
	return cmp.Or(strings.Compare(a.NodeID, b.NodeID), strings.Compare(a.Address, b.Address))
}

// wait returns when every asker has returned or, in a bounded round, at its
// patience (ctx, the round's deadline) whichever comes first: the round then
// ends without the askers still out, which return on their own once ctx is
// cancelled. Waited for, at 1,000 simulated nodes the ~666 askers of a lost
// domain took another 100-180 ms past the patience to notice it (the
// cancellations wait for a CPU busy with the failover), and the round held
// the decisions up for that long.
func (r *round) wait(ctx context.Context, wg *sync.WaitGroup, asked int) {
	if r.bounded {
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-ctx.Done():
		}
	} else {
		wg.Wait()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.bounded {
		r.late = asked - len(r.settled)
	}
}

// askNode asks one node about its shards of the round and records what it
// answered; a node without the batched question is asked per database.
func (r *round) askNode(ctx context.Context, ask AskTxnFunc, asks AskTxnsFunc, node models.NodeRef, lg *zap.Logger) {
	shards := r.byNode[node]
	var err error
	if asks != nil {
		var got map[string]map[int]models.ReplicaTxn
		if got, err = asks(ctx, node, shards); err == nil {
			r.record(node, shards, got)
			return
		}
		if !errors.Is(err, ErrNoBatch) || ask == nil {
			r.skipped(ctx, node, shards, err, lg)
			return
		}
	}
	for _, db := range slices.Sorted(maps.Keys(shards)) {
		got, err := ask(ctx, node, db, shards[db])
		if err != nil {
			r.skipped(ctx, node, map[string][]int{db: shards[db]}, err, lg)
			continue
		}
		r.record(node, map[string][]int{db: shards[db]}, map[string]map[int]models.ReplicaTxn{db: got})
	}
}

// record keeps node's answers about the shards it was asked about.
func (r *round) record(node models.NodeRef, asked map[string][]int, got map[string]map[int]models.ReplicaTxn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.settle(node)
	for db, ids := range asked {
		out := r.out[r.at[db]]
		for _, id := range ids {
			if a, ok := got[db][id]; ok {
				out[id][node.NodeID] = a
			}
		}
	}
}

// settle marks node as no longer awaited (under mu).
func (r *round) settle(node models.NodeRef) {
	if r.settled == nil {
		r.settled = map[string]bool{}
	}
	r.settled[node.NodeID] = true
}

func (r *round) skipped(ctx context.Context, node models.NodeRef, shards map[string][]int, err error, lg *zap.Logger) {
	if r.bounded && ctx.Err() != nil {
		return // counted in late when the round ends
	}
	r.mu.Lock()
	r.settle(node)
	r.mu.Unlock()
	n := 0
	for _, ids := range shards {
		n += len(ids)
	}
	lg.Warn("replica did not answer the last txn id question; skipped this round", zap.String("node_id", node.NodeID),
		zap.Int("databases", len(shards)), zap.Int("shards", n), zap.Error(err))
}
