package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// Rebalance implements broker.MasterOps: the plan, and unless dryRun its
// execution (started now, carried out by the reconcile loop move by move).
func (m *Master) Rebalance(ctx context.Context, dryRun bool) (any, error) {
	return m.do(ctx, func(ctx context.Context, st *statemachine.State) (any, error) {
		_, view, err := rebalancePlan(st)
		if err != nil {
			return nil, err
		}
		view.DryRun = dryRun
		if !dryRun {
			m.forced = true
		}
		return view, nil
	})
}

// needsPlan decides whether to compute a new placement plan now: on demand,
// for drains and replica-factor changes at once, and for membership changes
// only after they have been stable for RebalanceDelay.
func (m *Master) needsPlan(st *statemachine.State) bool {
	if m.forced {
		return true
	}
	now := m.cfg.Now()
	need := false
	for name := range st.StorageClusters {
		ids := slices.Sorted(maps.Keys(st.Nodes[name]))
		mb, ok := m.members[name]
		var due bool
		mb, due = trackMembership(mb, ok, strings.Join(ids, ","), now, m.cfg.RebalanceDelay)
		need = need || due
		m.members[name] = mb
	}
	for id := range st.Drains {
		for _, a := range st.Assignments {
			for _, sh := range a.Shards {
				if slices.Contains(sh.Replicas, id) {
					return true
				}
			}
		}
	}
	for name, a := range st.Assignments {
		db, ok := st.Databases[name]
		if !ok {
			continue
		}
		for _, sh := range a.Shards {
			if len(sh.Replicas) != db.ReplicaFactor {
				return true
			}
		}
	}
	return need
}

// trackMembership folds one observation of a cluster's live node set (sig) at
// now into what the master knows of it (mb; seen false at first sight in a
// term, taken as stable from now), and says whether a placement plan is due:
// the set differs from the one last found balanced and has not changed for
// delay.
func trackMembership(mb membership, seen bool, sig string, now time.Time, delay time.Duration) (membership, bool) {
	if !seen {
		mb = membership{sig: sig, since: now}
	} else if mb.sig != sig {
		mb.sig, mb.since = sig, now
	}
	return mb, mb.balanced != sig && now.Sub(mb.since) >= delay
}

// rebalance drives relocations: a shard gains its new replicas first, keeps
// them until they are in sync, hands leadership over if its leader is leaving,
// and only then drops the old replicas. A shard never has fewer in-sync
// replicas than before its move.
func (m *Master) rebalance(ctx context.Context) error {
	st := m.cfg.State()
	if len(m.pending) == 0 && m.needsPlan(st) {
		plans, view, err := rebalancePlan(st)
		if err != nil {
			m.warn.Warn("rebalance", "no rebalance plan", zap.Error(err))
			return nil
		}
		m.forced = false
		clear(m.leaders) // a new plan supersedes the last one's leaders
		for cluster, p := range plans {
			for k, t := range p.Target {
				cur := assigned(st, k)
				if !sameSet(cur, t.Replicas) {
					m.pending[k] = t.Replicas
				}
				if s, _ := st.ShardState(k.DB, k.Shard); t.Leader != "" && t.Leader != s.Leader {
					m.leaders[k] = t.Leader
				}
			}
			if p.Relocations == 0 {
				mb := m.members[cluster]
				mb.balanced = mb.sig
				m.members[cluster] = mb
			}
		}
		if len(m.pending) > 0 {
			m.lg.Info("rebalance started", zap.Int("shards", len(m.pending)), zap.Int("relocations", view.Relocations))
		}
	}
	if len(m.pending) == 0 {
		errs := m.balanceLeaders(ctx, st)
		if len(m.leaders) > 0 || fatal(ctx, errs) {
			return errs // the plan's leaders first
		}
		return errors.Join(errs, m.spreadLeaders(ctx))
	}
	keys := make([]placement.ShardKey, 0, len(m.pending))
	for k := range m.pending {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].DB != keys[j].DB {
			return keys[i].DB < keys[j].DB
		}
		return keys[i].Shard < keys[j].Shard
	})
	assign := map[string]models.Assignment{} // databases whose assignment changes this round
	var leaderMoves []placement.ShardKey
	active := 0
	for _, k := range keys {
		target := m.pending[k]
		a, ok := st.Assignments[k.DB]
		if !ok || k.Shard >= len(a.Shards) {
			delete(m.pending, k)
			continue
		}
		cur := a.Shards[k.Shard].Replicas
		if sameSet(cur, target) {
			delete(m.pending, k)
			continue
		}
		if active >= m.cfg.MaxMovesInFlight {
			break
		}
		active++
		adds := minus(target, cur)
		if len(adds) > 0 {
			setReplicas(assign, st, k, union(cur, adds))
			continue
		}
		// cur is a superset of target: remove once the target is in sync.
		if !shardInSync(st, a.Cluster, k.DB, k.Shard, target) {
			continue
		}
		s, _ := st.ShardState(k.DB, k.Shard)
		if s.Status == models.StatusOnline && !slices.Contains(target, s.Leader) {
			leaderMoves = append(leaderMoves, k)
			continue
		}
		setReplicas(assign, st, k, slices.Clone(target))
	}
	errs := m.moveLeadersOff(ctx, st, leaderMoves)
	if fatal(ctx, errs) {
		return errs
	}
	names := slices.Sorted(maps.Keys(assign))
	for _, name := range names {
		key := m.cfg.Keys.Assign(name)
		ok, err := m.write(ctx, []coordinator.Cmp{coordinator.ModRevIs(key, st.ModRev(statemachine.SourceAssign, name))},
			[]coordinator.Op{coordinator.OpPut(key, mustJSON(assign[name]), 0)}, statemachine.SourceAssign)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("moving replicas of %s: %w", name, err))
			if fatal(ctx, err) {
				return errs
			}
			continue
		}
		if ok {
			m.lg.Info("replicas moved", zap.String("db", name))
		}
	}
	return errs
}

// fatal: err ends the pass (the term is lost or the master stops); any
// other error concerns one database and the others go on.
func fatal(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, coordinator.ErrDeposed) || ctx.Err() != nil)
}

// moveLeadersOff hands leadership of shards whose leader is being removed to
// the in-sync target replica with the highest last_txn_id. The shards of one
// database change in one publication: their states share one value, and
// publishing them one by one from the same snapshot would fail every compare
// but the first.
func (m *Master) moveLeadersOff(ctx context.Context, st *statemachine.State, keys []placement.ShardKey) (errs error) {
	byDB := map[string][]placement.ShardKey{}
	var dbs []string
	for _, k := range keys {
		if _, seen := byDB[k.DB]; !seen {
			dbs = append(dbs, k.DB)
		}
		byDB[k.DB] = append(byDB[k.DB], k)
	}
	sort.Strings(dbs)
	for _, db := range dbs {
		a := st.Assignments[db]
		prev := st.ShardStates[db]
		next := models.ShardStates{DB: db, Shards: slices.Clone(prev.Shards)}
		in := ShardInputs{DB: db, Assign: a, States: prev, Live: st.Nodes[a.Cluster], ISR: st.ISR[a.Cluster], Drains: st.Drains}
		leads := map[string]int{}
		for _, s := range prev.Shards {
			if s.Status == models.StatusOnline {
				leads[s.Leader]++
			}
		}
		var changed []int
		for _, k := range byDB[db] {
			target := m.pending[k]
			best := pickLeader(in, models.ShardAssignment{ID: k.Shard, Replicas: target}, target, "", leads)
			i := indexOf(next, k.Shard)
			if best == "" || i < 0 {
				continue
			}
			cur := next.Shards[i]
			leads[cur.Leader]--
			leads[best]++
			next.Shards[i] = models.ShardState{ID: k.Shard, Leader: best, Term: NextTerm(in, cur), Status: models.StatusOnline}
			changed = append(changed, k.Shard)
			m.lg.Info("moving leadership off a leaving replica", zap.String("db", db), zap.Int("shard", k.Shard),
				zap.String("from", cur.Leader), zap.String("to", best), zap.Int64("term", next.Shards[i].Term))
		}
		if len(changed) == 0 {
			continue
		}
		if err := m.publishStates(ctx, st, db, next, changed); err != nil {
			errs = errors.Join(errs, fmt.Errorf("moving leaders of %s: %w", db, err))
			if fatal(ctx, err) {
				return errs
			}
		}
	}
	return errs
}

// balanceLeaders hands leadership to the plan's leaders once its relocations
// are done (a replica that moved back after a drain would otherwise hold data
// but never lead). Each handover is graceful: only to a live, non-draining
// replica in the in-sync set, else the target is dropped.
func (m *Master) balanceLeaders(ctx context.Context, st *statemachine.State) (errs error) {
	byDB := map[string][]int{}
	var dbs []string
	for k, to := range m.leaders {
		delete(m.leaders, k)
		a, ok := st.Assignments[k.DB]
		s, has := st.ShardState(k.DB, k.Shard)
		if !ok || !has || k.Shard >= len(a.Shards) || s.Status != models.StatusOnline || s.Leader == to {
			continue
		}
		_, live := st.Nodes[a.Cluster][to]
		_, draining := st.Drains[to]
		if !live || draining || !slices.Contains(a.Shards[k.Shard].Replicas, to) || !shardInSync(st, a.Cluster, k.DB, k.Shard, []string{to}) {
			continue
		}
		if _, seen := byDB[k.DB]; !seen {
			dbs = append(dbs, k.DB)
		}
		byDB[k.DB] = append(byDB[k.DB], k.Shard)
		m.leaders[k] = to // kept until published
	}
	sort.Strings(dbs)
	for _, db := range dbs {
		prev := st.ShardStates[db]
		next := models.ShardStates{DB: db, Shards: slices.Clone(prev.Shards)}
		in := ShardInputs{DB: db, Assign: st.Assignments[db], States: prev, Live: st.Nodes[st.Assignments[db].Cluster]}
		changed := byDB[db]
		sort.Ints(changed)
		for _, id := range changed {
			i := indexOf(next, id)
			k := placement.ShardKey{DB: db, Shard: id}
			cur := next.Shards[i]
			next.Shards[i] = models.ShardState{ID: id, Leader: m.leaders[k], Term: NextTerm(in, cur), Status: models.StatusOnline}
			m.lg.Info("balancing leadership", zap.String("db", db), zap.Int("shard", id),
				zap.String("from", cur.Leader), zap.String("to", m.leaders[k]), zap.Int64("term", next.Shards[i].Term))
		}
		if err := m.publishStates(ctx, st, db, next, changed); err != nil {
			// Targets stay: the next pass re-checks them.
			errs = errors.Join(errs, fmt.Errorf("balancing leaders of %s: %w", db, err))
			if fatal(ctx, err) {
				return errs
			}
			continue
		}
		for _, id := range changed {
			delete(m.leaders, placement.ShardKey{DB: db, Shard: id})
		}
	}
	return errs
}

// spreadLeaders hands leadership over, gracefully, until every database's
// leaders are spread max - min <= 1 over its nodes (SpreadLeaders), once its
// cluster's membership has been stable for RebalanceDelay.
func (m *Master) spreadLeaders(ctx context.Context) (errs error) {
	st := m.cfg.State()
	now := m.cfg.Now()
	// A cluster whose inputs did not change since a pass found nothing to
	// move is skipped: the decision is cheap, but not times every database
	// on every pass.
	sigs := map[string]string{}
	for name := range st.StorageClusters {
		mb, seen := m.members[name]
		if !seen || !ClusterReady(st, name) {
			continue
		}
		sigs[name] = fmt.Sprintf("%s|%d|%t|%d|%d|%d|%d|%d", mb.sig, mb.since.UnixNano(), now.Sub(mb.since) >= m.cfg.RebalanceDelay,
			st.Revisions[statemachine.SourceShardState], st.Revisions[statemachine.SourceAssign], st.Revisions[statemachine.SourceDrain],
			st.Revisions[statemachine.SourceDatabaseConfig], st.Revisions[statemachine.ClusterISRSource(name)])
	}
	dirty := map[string]bool{}
	for _, db := range slices.Sorted(maps.Keys(st.Assignments)) {
		a := st.Assignments[db]
		sig, ok := sigs[a.Cluster]
		if _, exists := st.Databases[db]; !exists || !ok || m.spreadClean[a.Cluster] == sig {
			continue
		}
		next, changed := SpreadLeaders(SpreadInput{
			ShardInputs: ShardInputs{DB: db, Assign: a, States: st.ShardStates[db], Live: st.Nodes[a.Cluster], ISR: st.ISR[a.Cluster], Drains: st.Drains},
			StableSince: m.members[a.Cluster].since, Now: now, Delay: m.cfg.RebalanceDelay, MaxMoves: m.cfg.MaxMovesInFlight,
		})
		if len(changed) == 0 {
			continue
		}
		dirty[a.Cluster] = true
		prev := st.ShardStates[db]
		if err := m.publishStates(ctx, st, db, next, changed); err != nil {
			errs = errors.Join(errs, fmt.Errorf("spreading leaders of %s: %w", db, err))
			if fatal(ctx, err) {
				return errs
			}
			continue
		}
		for _, id := range changed {
			i := indexOf(next, id)
			m.lg.Info("spreading leadership", zap.String("db", db), zap.Int("shard", id),
				zap.String("from", prev.Shards[i].Leader), zap.String("to", next.Shards[i].Leader), zap.Int64("term", next.Shards[i].Term))
		}
	}
	for name, sig := range sigs {
		if !dirty[name] {
			m.spreadClean[name] = sig
		}
	}
	return errs
}

func assigned(st *statemachine.State, k placement.ShardKey) []string {
	a := st.Assignments[k.DB]
	if k.Shard < len(a.Shards) {
		return a.Shards[k.Shard].Replicas
	}
	return nil
}

func setReplicas(assign map[string]models.Assignment, st *statemachine.State, k placement.ShardKey, replicas []string) {
	a, ok := assign[k.DB]
	if !ok {
		a = st.Assignments[k.DB]
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
