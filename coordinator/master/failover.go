package master

import (
	"context"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// failover publishes new leaders for the shards of every database among
// names whose leader died (or whose term is behind its replicas' logs),
// under the per-shard failover locks, one database or many on one path:
// the replicas of the databases that need a leader are asked in parallel,
// the decisions are taken one database after the other on shared
// cluster-wide leadership counts (the tie-break spreads a dead node's shards
// over the survivors), and the new states are published in batches of many
// databases (publishBatch). A node leading shards of 32 databases then costs
// one round of questions and one batch of writes, not 32 in a row. It returns the databases whose publication
// failed, with why (kv.ErrDeposed when the term ended), and whether it
// published new states for any.
func (m *Master) failover(ctx context.Context, names []string) (failed map[string]error, published bool) {
	if inGrace(m.ready, m.cfg.Now(), m.cfg.LivenessGrace) {
		m.scope.full = true // the resync pass comes back after the grace, to every database
		return nil, false
	}
	st := m.cfg.State()
	m.led.sync(st)
	var ins []ShardInputs
	for _, name := range names {
		if m.led.dbs[name] {
			continue
		}
		in, ok := m.derived.failoverInputs(st, name)
		if !ok {
			continue
		}
		in.Moved = m.moves.movedFor(in.Assign.Cluster, name)
		// the shards that need a leader, read once for the check, the
		// round's questions and the decisions
		in, ok = withView(in)
		if !ok {
			m.moves.republished(in.Assign.Cluster, name, in.Moved)
			if len(in.Moved) == 0 {
				m.led.dbs[name] = true
			}
			continue
		}
		ins = append(ins, in)
	}
	// The replicas' last txn ids and terms are asked for now, only for the
	// databases that need a leader (their records do not carry them): one
	// round, one request per node.
	answers := gatherTxn(ctx, m.cfg.AskTxn, m.cfg.AskTxns, m.cfg.AskTimeout, m.cfg.TrustedAskTimeout, ins, m.lg)
	leads := map[string]map[string]int{} // per cluster, kept up to date by the decisions
	var ups []statesUpdate
	var decided []ShardInputs
	for i, in := range ins {
		c := in.Assign.Cluster
		if leads[c] == nil {
			leads[c] = m.derived.clusterLeads(st, c)
		}
		in.Answers, in.Leads = answers[i], leads[c]
		ops := FailoverOps(st, in, m.cfg.Term, m.cfg.Now())
		if len(ops) == 0 {
			m.moves.republished(c, in.DB, waitedOut(in, in.States))
			continue
		}
		next, changed := applyFailover(in.DB, st.ShardStates.At(in.DB), ops)
		ups = append(ups, statesUpdate{db: in.DB, next: next, changed: changed})
		decided = append(decided, in)
	}
	failed = m.publishBatch(ctx, st, ups)
	for i, u := range ups {
		if failed[u.db] != nil {
			continue
		}
		in := decided[i]
		m.moves.republished(in.Assign.Cluster, u.db, waitedOut(in, u.next))
		m.leadersChanged(st, u.db, u.next, u.changed)
	}
	return failed, len(failed) < len(ups)
}

// leadersChanged counts and logs the shards of db whose leader or status a
// publication of next changed: one line per database, with each changed
// shard's leader, term, status and reason (a whole domain's failover at
// 1,000 nodes was ~10,700 lines, one per shard, ~55 ms of the master's
// loop at the info level).
func (m *Master) leadersChanged(st *statemachine.State, db string, next models.ShardStates, changed []int) {
	m.cfg.Metrics.failedOver(st.ShardStates.At(db), next, changed)
	if len(changed) > 0 {
		m.lg.Info("shard leaders changed", zap.String("db", db), zap.Int("count", len(changed)),
			zap.Array("shards", changedShards{next, changed}))
	}
}

// changedShards logs the changed shards of a publication.
type changedShards struct {
	next    models.ShardStates
	changed []int
}

func (c changedShards) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, id := range c.changed {
		if err := enc.AppendObject(shardLog(c.next.Shards[indexOf(c.next, id)])); err != nil {
			return err
		}
	}
	return nil
}

// shardLog logs one shard's state.
type shardLog models.ShardState

func (s shardLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("shard", s.ID)
	enc.AddString("leader", s.Leader)
	enc.AddInt64("term", s.Term)
	enc.AddString("status", s.Status)
	if s.Reason != "" {
		enc.AddString("reason", s.Reason)
	}
	return nil
}
