package master

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"

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
		sig := strings.Join(ids, ",")
		mb, ok := m.members[name]
		if !ok {
			// First sight in this term: treat as stable and balanced unless
			// placement says otherwise after the delay.
			mb = membership{sig: sig, since: now}
		} else if mb.sig != sig {
			mb.sig, mb.since = sig, now
		}
		if mb.balanced != sig && now.Sub(mb.since) >= m.cfg.RebalanceDelay {
			need = true
		}
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

// rebalance drives relocations: a shard gains its new replicas first, keeps
// them until they are in sync, hands leadership over if its leader is leaving,
// and only then drops the old replicas. A shard never has fewer in-sync
// replicas than before its move.
func (m *Master) rebalance(ctx context.Context) error {
	st := m.cfg.State()
	if len(m.pending) == 0 && m.needsPlan(st) {
		plans, view, err := rebalancePlan(st)
		if err != nil {
			m.lg.Warn("no rebalance plan", zap.Error(err))
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
		return m.balanceLeaders(ctx, st)
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
	if err := m.moveLeadersOff(ctx, st, leaderMoves); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(assign))
	for _, name := range names {
		key := m.cfg.Keys.Assign(name)
		ok, err := m.write(ctx, []coordinator.Cmp{coordinator.ValueIs(key, mustJSON(st.Assignments[name]))},
			[]coordinator.Op{coordinator.OpPut(key, mustJSON(assign[name]), 0)}, statemachine.SourceAssign)
		if err != nil {
			return err
		}
		if ok {
			m.lg.Info("replicas moved", zap.String("db", name))
		}
	}
	return nil
}

// moveLeadersOff hands leadership of shards whose leader is being removed to
// the in-sync target replica with the highest last_txn_id. The shards of one
// database change in one publication: their states share one value, and
// publishing them one by one from the same snapshot would fail every compare
// but the first.
func (m *Master) moveLeadersOff(ctx context.Context, st *statemachine.State, keys []placement.ShardKey) error {
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
			sh := models.ShardAssignment{ID: k.Shard, Replicas: target}
			best, _ := pickLeader(in, k.Shard, liveReplicas(in, sh, target), leads)
			i := indexOf(next, k.Shard)
			if best == "" || i < 0 {
				continue
			}
			cur := next.Shards[i]
			leads[cur.Leader]--
			leads[best]++
			next.Shards[i] = models.ShardState{ID: k.Shard, Leader: best, Term: cur.Term + 1, Status: models.StatusOnline}
			changed = append(changed, k.Shard)
			m.lg.Info("moving leadership off a leaving replica", zap.String("db", db), zap.Int("shard", k.Shard),
				zap.String("from", cur.Leader), zap.String("to", best), zap.Int64("term", cur.Term+1))
		}
		if len(changed) == 0 {
			continue
		}
		if err := m.publishStates(ctx, db, prev, next, changed); err != nil {
			return err
		}
	}
	return nil
}

// balanceLeaders hands leadership to the plan's leaders once its relocations
// are done (a replica that moved back after a drain would otherwise hold data
// but never lead). Each handover is graceful: only to a live, non-draining
// replica in the in-sync set, else the target is dropped.
func (m *Master) balanceLeaders(ctx context.Context, st *statemachine.State) error {
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
		changed := byDB[db]
		sort.Ints(changed)
		for _, id := range changed {
			i := indexOf(next, id)
			k := placement.ShardKey{DB: db, Shard: id}
			cur := next.Shards[i]
			next.Shards[i] = models.ShardState{ID: id, Leader: m.leaders[k], Term: cur.Term + 1, Status: models.StatusOnline}
			m.lg.Info("balancing leadership", zap.String("db", db), zap.Int("shard", id),
				zap.String("from", cur.Leader), zap.String("to", m.leaders[k]), zap.Int64("term", cur.Term+1))
		}
		if err := m.publishStates(ctx, db, prev, next, changed); err != nil {
			return err // targets stay: the next pass re-checks them
		}
		for _, id := range changed {
			delete(m.leaders, placement.ShardKey{DB: db, Shard: id})
		}
	}
	return nil
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
