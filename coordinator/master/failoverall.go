package master

import (
	"context"
	"errors"
	"sync"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// failoverWriters bounds the databases whose new leaders are published at
// once.
const failoverWriters = 16

// failoverAll fails over every database among names that needs a leader, as
// failover does for one, but together: the replicas are asked in parallel,
// the decisions are taken one database after the other on shared
// cluster-wide leadership counts (the tie-break spreads a dead node's shards
// over the survivors as before), and the new states are published in
// parallel, each under its own failover locks. A node leading shards of 32
// databases then costs one round of questions and writes, not 32 in a row.
// A database it does not settle is left to failover, alone, with its retry.
func (m *Master) failoverAll(ctx context.Context, names []string) error {
	if inGrace(m.ready, m.cfg.Now(), m.cfg.LivenessGrace) {
		return nil
	}
	st := m.cfg.State()
	var ins []ShardInputs
	for _, name := range names {
		if st.Invalid[statemachine.SourceAssign][name] != "" || st.Invalid[statemachine.SourceShardState][name] != "" {
			continue
		}
		if in, ok := m.derived.failoverInputs(st, name); ok && anyNeedsLeader(in) {
			ins = append(ins, in)
		}
	}
	if len(ins) < 2 {
		return nil // one alone goes through failover
	}
	answers := make([]map[int]map[string]models.ReplicaTxn, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = gatherTxn(ctx, m.cfg.AskTxn, m.cfg.AskTimeout, in, m.lg)
		}()
	}
	wg.Wait()
	type publication struct {
		db      string
		next    models.ShardStates
		changed []int
	}
	var pubs []publication
	leads := map[string]map[string]int{} // per cluster, kept up to date by the decisions
	for i, in := range ins {
		c := in.Assign.Cluster
		if leads[c] == nil {
			leads[c] = m.derived.clusterLeads(st, c)
		}
		in.Answers, in.Leads = answers[i], leads[c]
		ops := FailoverOpsFor(st, in, m.cfg.Term, m.cfg.Now())
		if len(ops) == 0 {
			continue
		}
		next, changed := applyFailover(in.DB, st.ShardStates.At(in.DB), ops)
		pubs = append(pubs, publication{db: in.DB, next: next, changed: changed})
	}
	var mu sync.Mutex
	var deposed error
	sem := make(chan struct{}, failoverWriters)
	for _, p := range pubs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := m.publishStates(ctx, st, p.db, p.next, p.changed); err != nil {
				if errors.Is(err, kv.ErrDeposed) {
					mu.Lock()
					deposed = err
					mu.Unlock()
				}
				return // failover retries this database alone
			}
			m.cfg.Metrics.failedOver(st.ShardStates.At(p.db), p.next, p.changed)
			for _, id := range p.changed {
				s := p.next.Shards[indexOf(p.next, id)]
				m.lg.Info("shard leader changed", zap.String("db", p.db), zap.Int("shard", id),
					zap.String("leader", s.Leader), zap.Int64("term", s.Term), zap.String("status", s.Status), zap.String("reason", s.Reason))
			}
		}()
	}
	wg.Wait()
	return deposed
}
