package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// Rebalance implements broker.MasterOps. The answer lists exactly the
// operators that run: those already in flight if any (a new plan follows
// them), else a fresh plan's, which (unless dryRun) are persisted before
// the call returns and then carried out step by step.
func (m *Master) Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error) {
	return do(ctx, m, func(ctx context.Context, st *statemachine.State) (models.PlanView, error) {
		if (!Ready(st) || !m.sameCluster(st) || !m.loaded) && !dryRun {
			return models.PlanView{}, fmt.Errorf("%w: master is still loading state from etcd", models.ErrUnavailable)
		}
		if len(m.ops) > 0 {
			if !dryRun {
				m.forced = true
			}
			_, _, _, lb, _ := PlanOps(st, m.cfg.Term, m.cfg.Now())
			v := planView(m.inFlight(), 0, lb)
			v.DryRun, v.InFlight = dryRun, true
			return v, nil
		}
		ops, balanced, reloc, lb, err := PlanOps(st, m.cfg.Term, m.cfg.Now())
		m.trackMembers(st, m.cfg.Now())
		if err != nil {
			return models.PlanView{}, fmt.Errorf("%w: %w", models.ErrImpossible, err)
		}
		v := planView(ops, reloc, lb)
		v.DryRun = dryRun
		if dryRun {
			return v, nil
		}
		if err := m.adopt(ctx, ops, balanced); err != nil {
			return models.PlanView{}, err
		}
		return v, nil
	})
}

func planView(ops []Operator, relocations, lowerBound int) models.PlanView {
	v := models.PlanView{Relocations: relocations, LowerBound: lowerBound, Moves: []models.MoveView{}, Operators: slices.Clone(ops)}
	if v.Operators == nil {
		v.Operators = []Operator{}
	}
	var adds, leaders, removes []models.MoveView
	for _, o := range ops {
		for _, n := range minus(o.To, o.From) {
			adds = append(adds, models.MoveView{Kind: string(placement.MoveAdd), DB: o.DB, Shard: o.Shard, To: n})
		}
		if o.Leader != "" {
			leaders = append(leaders, models.MoveView{Kind: string(placement.MoveLeader), DB: o.DB, Shard: o.Shard, From: o.FromLeader, To: o.Leader})
		}
		if o.Kind == OpMove {
			for _, n := range minus(o.From, o.To) {
				removes = append(removes, models.MoveView{Kind: string(placement.MoveRemove), DB: o.DB, Shard: o.Shard, From: n})
			}
		}
	}
	v.Moves = append(v.Moves, slices.Concat(adds, leaders, removes)...)
	return v
}

// inFlight lists the operators being carried out, sorted by shard.
func (m *Master) inFlight() []Operator {
	ops := slices.Collect(maps.Values(m.ops))
	slices.SortFunc(ops, compareOps)
	return ops
}

// loadOperators reads the operators a previous master persisted, once per
// term before anything is scheduled: they are resumed, not re-planned.
// Records that cannot be used are deleted (the master owns the prefix; the
// next plan covers their shards again).
func (m *Master) loadOperators(ctx context.Context) error {
	kvs, _, err := m.cfg.Store.List(ctx, operatorsPrefix(m.cfg.Keys))
	if err != nil {
		return fmt.Errorf("loading operators: %w", err)
	}
	var drop []kv.Op
	for _, kvp := range kvs {
		o, err := decodeOperator(m.cfg.Keys, kvp)
		if err != nil {
			m.lg.Warn("dropping an unusable operator record", zap.String("key", kvp.Key), zap.Error(err))
			drop = append(drop, kv.OpDelete(kvp.Key))
			continue
		}
		m.ops[keyOf(o)] = o
	}
	if err := m.fencedChunks(ctx, drop); err != nil {
		return err
	}
	m.loaded = true
	if len(m.ops) > 0 {
		m.lg.Info("resuming operators of an earlier term", zap.Int("operators", len(m.ops)))
	}
	return nil
}

// fencedChunks applies ops in fenced txns of at most maxTxnOps.
func (m *Master) fencedChunks(ctx context.Context, ops []kv.Op) error {
	for i := 0; i < len(ops); i += maxTxnOps {
		ok, _, err := m.cfg.Election.FencedTxn(ctx, m.cfg.Term, nil, ops[i:min(i+maxTxnOps, len(ops))])
		if err != nil {
			return err
		}
		if !ok {
			return kv.ErrDeposed
		}
	}
	return nil
}

func (m *Master) putOp(o Operator) kv.Op {
	return kv.OpPut(operatorKey(m.cfg.Keys, o.DB, o.Shard), mustJSON(o), 0)
}

func (m *Master) deleteOp(o Operator) kv.Op {
	return kv.OpDelete(operatorKey(m.cfg.Keys, o.DB, o.Shard))
}

// adopt persists a plan's operators (fenced, before any of their steps
// runs) and takes them in flight.
func (m *Master) adopt(ctx context.Context, ops []Operator, balanced []string) error {
	puts := make([]kv.Op, 0, len(ops))
	for _, o := range ops {
		puts = append(puts, m.putOp(o))
	}
	if err := m.fencedChunks(ctx, puts); err != nil {
		return err
	}
	for _, o := range ops {
		m.ops[keyOf(o)] = o
	}
	m.forced = false
	for _, name := range balanced {
		mb := m.members[name]
		mb.Balanced = mb.Sig
		m.members[name] = mb
	}
	if len(ops) > 0 {
		m.lg.Info("rebalance started", zap.Int("operators", len(ops)))
	}
	return nil
}

// trackMembers updates what the master knows of each cluster's live set at
// now.
func (m *Master) trackMembers(st *statemachine.State, now time.Time) {
	for name := range st.StorageClusters {
		mb, ok := m.members[name]
		mb, _ = TrackMembership(mb, ok, m.sigs.of(st, name), now, m.cfg.RebalanceDelay)
		m.members[name] = mb
	}
}

// memberSigs keeps MembershipSig per cluster with the live nodes it was
// made from: a node record rewritten (every report, thousands while
// databases are placed) leaves the set of ids as it was, and the
// signature (every id, sorted and joined) is made again only when a node
// came or went.
type memberSigs map[string]memberSig

type memberSig struct {
	live statemachine.Map[models.StorageNode]
	sig  string
}

func (s memberSigs) of(st *statemachine.State, cluster string) string {
	live := st.Nodes.At(cluster)
	c, ok := s[cluster]
	if ok && !live.Same(c.live) {
		statemachine.Changed(c.live, live, func(id string) {
			if c.live.Has(id) != live.Has(id) {
				ok = false
			}
		})
	}
	if !ok {
		c.sig = MembershipSig(st, cluster)
	}
	s[cluster] = memberSig{live: live, sig: c.sig}
	return c.sig
}

// rebalance runs Schedule's plan and spreading decisions (failover runs per
// database in syncDB): a new plan is persisted, then every operator in
// flight advances by its next step.
func (m *Master) rebalance(ctx context.Context) error {
	st := m.cfg.State()
	// One instant for the whole pass: the spreading signature must record
	// the same side of the delay the decision saw, or a decision made just
	// before the delay ran out would be cached as "nothing to spread" for
	// after it, and spreading would wait for an unrelated change.
	now := m.cfg.Now()
	m.trackMembers(st, now)
	in := Input{State: st, Now: now, Delay: m.cfg.RebalanceDelay, Members: m.members, InFlight: m.inFlight(),
		Forced: m.forced, MaxMoves: m.cfg.MaxMovesInFlight, SpreadSkip: map[string]bool{}, MasterTerm: m.cfg.Term, counts: &m.counts}
	sigs := m.spreadSigs(st, now)
	for name, sig := range sigs {
		in.SpreadSkip[name] = m.spreadClean[name] == sig
	}
	for name := range st.StorageClusters {
		if _, ok := sigs[name]; !ok {
			in.SpreadSkip[name] = true
		}
	}
	d := Schedule(in)
	if d.Err != nil {
		m.warn.Warn("rebalance", "no rebalance plan", zap.Error(d.Err))
		return nil
	}
	if d.Planned {
		if err := m.adopt(ctx, d.Plan, d.Balanced); err != nil {
			return err
		}
	}
	if len(m.ops) > 0 {
		return m.advance(ctx, st)
	}
	errs := m.publishLeaderOps(ctx, st, d.Spread, "spreading leadership")
	dirty := map[string]bool{}
	for _, o := range d.Spread {
		dirty[st.Assignments.At(o.DB).Cluster] = true
	}
	for name, sig := range sigs {
		if !dirty[name] {
			m.spreadClean[name] = sig
		}
	}
	return errs
}

// spreadSigs: per ready cluster, the inputs of leader spreading; a cluster
// whose inputs did not change since spreading found nothing is skipped (the
// decision is cheap, but not times every database on every pass).
func (m *Master) spreadSigs(st *statemachine.State, now time.Time) map[string]string {
	sigs := map[string]string{}
	for name := range st.StorageClusters {
		mb, seen := m.members[name]
		if !seen || !ClusterReady(st, name) {
			continue
		}
		sigs[name] = fmt.Sprintf("%s|%d|%t|%d|%d|%d|%d|%d", mb.Sig, mb.Since.UnixNano(), now.Sub(mb.Since) >= m.cfg.RebalanceDelay,
			st.Revisions[statemachine.SourceShardState], st.Revisions[statemachine.SourceAssign], st.Revisions[statemachine.SourceDrain],
			st.Revisions[statemachine.SourceDatabaseConfig], st.Revisions[statemachine.ClusterISRSource(name)])
	}
	return sigs
}

// advance performs the next step of every operator in flight: each step is
// one fenced txn that also records the operator's progress (or deletes it
// when it finishes). At most MaxMovesInFlight operators change replicas at
// once; a shard never has fewer replicas than its target, nor fewer in-sync
// replicas than before its move (add, wait in sync, then remove).
func (m *Master) advance(ctx context.Context, st *statemachine.State) error {
	assign := map[string]models.Assignment{}
	records := map[string][]kv.Op{} // per database, written with its assignment
	var leaders, finished []Operator
	after := map[shardKey]Operator{} // operators as they stand once their write lands
	active := 0
	for _, o := range m.inFlight() {
		step := NextStep(o, st)
		if inReplicaStage(step) {
			if active >= m.cfg.MaxMovesInFlight {
				continue
			}
			active++
		}
		k := placement.ShardKey{DB: o.DB, Shard: o.Shard}
		switch step {
		case StepAdd:
			o.Step = StepWaitSync
			setReplicas(assign, st, k, union(assigned(st, k), o.To))
			records[o.DB] = append(records[o.DB], m.putOp(o))
			after[keyOf(o)] = o
		case StepRemove:
			setReplicas(assign, st, k, slices.Clone(o.To))
			if o.Leader == "" {
				records[o.DB] = append(records[o.DB], m.deleteOp(o))
				o.Step = StepDone
			} else {
				o.Step = StepLeader
				records[o.DB] = append(records[o.DB], m.putOp(o))
			}
			after[keyOf(o)] = o
		case StepLeaveLeader, StepLeader:
			o.Step = step
			leaders = append(leaders, o)
		case StepDone, StepCancel:
			if step == StepCancel {
				m.lg.Info("operator cannot finish; dropped", zap.String("db", o.DB), zap.Int("shard", o.Shard), zap.String("kind", string(o.Kind)))
			}
			finished = append(finished, o)
		}
	}
	var errs error
	if len(finished) > 0 {
		dels := make([]kv.Op, 0, len(finished))
		for _, o := range finished {
			dels = append(dels, m.deleteOp(o))
		}
		if err := m.fencedChunks(ctx, dels); err != nil {
			return err
		}
		for _, o := range finished {
			delete(m.ops, keyOf(o))
		}
	}
	if err := m.publishLeaderOps(ctx, st, leaders, "moving leadership"); fatal(ctx, err) {
		return err
	} else {
		errs = errors.Join(errs, err)
	}
	for _, name := range slices.Sorted(maps.Keys(assign)) {
		key := m.cfg.Keys.Assign(name)
		ops := append([]kv.Op{kv.OpPut(key, mustJSON(assign[name]), 0)}, records[name]...)
		ok, err := m.write(ctx, []kv.Cmp{kv.ModRevIs(key, st.ModRev(statemachine.SourceAssign, name))}, ops, statemachine.SourceAssign)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("moving replicas of %s: %w", name, err))
			if fatal(ctx, err) {
				return errs
			}
			continue
		}
		if !ok {
			errs = errors.Join(errs, fmt.Errorf("%w: assignment of %s", errChanged, name))
			continue
		}
		for k, o := range after {
			if k.DB != name {
				continue
			}
			if o.Step == StepDone {
				delete(m.ops, k)
			} else {
				m.ops[k] = o
			}
		}
		m.lg.Info("replicas moved", zap.String("db", name))
	}
	return errs
}

// fatal: err ends the pass (the term is lost or the master stops); any
// other error concerns one database and the others go on.
func fatal(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, kv.ErrDeposed) || ctx.Err() != nil)
}

// publishLeaderOps performs leader steps: a transfer off a leaving replica
// (StepLeaveLeader: to the in-sync target replica with the most recent log),
// a transfer to an operator's leader (StepLeader). The shards of one
// database change in one publication, with the operators' records: their
// states share one value, and publishing them one by one from the same
// snapshot would fail every compare but the first.
func (m *Master) publishLeaderOps(ctx context.Context, st *statemachine.State, ops []Operator, msg string) (errs error) {
	byDB := map[string][]Operator{}
	for _, o := range ops {
		byDB[o.DB] = append(byDB[o.DB], o)
	}
	for _, db := range slices.Sorted(maps.Keys(byDB)) {
		a := st.Assignments.At(db)
		prev := st.ShardStates.At(db)
		next := models.ShardStates{DB: db, Shards: slices.Clone(prev.Shards), UID: prev.UID}
		in := ShardInputs{DB: db, Assign: a, States: prev, Live: st.Nodes.At(a.Cluster), ISR: st.ISR.At(a.Cluster), Drains: st.Drains,
			ClusterID: st.ListedFrom[statemachine.ClusterISRSource(a.Cluster)]}
		leads := map[string]int{}
		for _, s := range prev.Shards {
			if s.Status == models.StatusOnline {
				leads[s.Leader]++
			}
		}
		var changed []int
		var records []kv.Op
		after := map[shardKey]Operator{}
		for _, o := range byDB[db] {
			i := indexOf(next, o.Shard)
			if i < 0 {
				continue
			}
			to := o.Leader
			if o.Step == StepLeaveLeader {
				to, _ = pickLeader(in, o.Shard, liveReplicas(in, models.ShardAssignment{ID: o.Shard, Replicas: o.To}, o.To), leads)
			}
			cur := next.Shards[i]
			if to == "" || (to == cur.Leader && cur.Status == models.StatusOnline) {
				continue
			}
			leads[cur.Leader]--
			leads[to]++
			next.Shards[i] = models.ShardState{ID: o.Shard, Leader: to, Term: NextTerm(in, cur), Status: models.StatusOnline}
			changed = append(changed, o.Shard)
			if _, tracked := m.ops[keyOf(o)]; tracked {
				if o.Step == StepLeaveLeader {
					o.Step = StepRemove
					records = append(records, m.putOp(o))
				} else {
					o.Step = StepDone
					records = append(records, m.deleteOp(o))
				}
				after[keyOf(o)] = o
			}
			m.lg.Info(msg, zap.String("db", db), zap.Int("shard", o.Shard),
				zap.String("from", cur.Leader), zap.String("to", to), zap.Int64("term", next.Shards[i].Term))
		}
		if len(changed) == 0 {
			continue
		}
		if err := m.publishStates(ctx, st, db, next, changed, records...); err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s of %s: %w", msg, db, err))
			if fatal(ctx, err) {
				return errs
			}
			continue
		}
		for k, o := range after {
			if o.Step == StepDone {
				delete(m.ops, k)
			} else {
				m.ops[k] = o
			}
		}
	}
	return errs
}

func assigned(st *statemachine.State, k placement.ShardKey) []string {
	a := st.Assignments.At(k.DB)
	if k.Shard < len(a.Shards) {
		return a.Shards[k.Shard].Replicas
	}
	return nil
}

func setReplicas(assign map[string]models.Assignment, st *statemachine.State, k placement.ShardKey, replicas []string) {
	a, ok := assign[k.DB]
	if !ok {
		a = st.Assignments.At(k.DB)
		a.Shards = slices.Clone(a.Shards)
	}
	a.Shards[k.Shard] = models.ShardAssignment{ID: k.Shard, Replicas: replicas}
	assign[k.DB] = a
}

func sameSet(a, b []string) bool { return len(a) == len(b) && subset(a, b) }

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
