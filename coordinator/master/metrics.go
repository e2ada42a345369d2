package master

import (
	"github.com/cairn-db/cairn/models"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of a master candidate. One value lives as long as the process and
// is handed to every term's Master.
type Metrics struct {
	isMaster      prometheus.Gauge
	term          prometheus.Gauge
	failovers     *prometheus.CounterVec
	leaderChanges prometheus.Counter
	deferred      prometheus.Counter
}

// Failover results, the "result" label of cairn_master_failovers_total.
const (
	failoverNewLeader = "new_leader" // another in-sync replica took over
	failoverOffline   = "offline"    // no live in-sync replica: the shard went offline
)

// NewMetrics registers the master's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		isMaster: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_master_is_master",
			Help: "1 while this node holds the master term, else 0."}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_master_term",
			Help: "Term (election key create revision) this node last held as master; 0 if never."}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_master_failovers_total",
			Help: "Shards whose live leader was lost, by result: new_leader (an in-sync replica took over) or offline."}, []string{"result"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_leader_changes_total",
			Help: "Shard leaders published by this node as master (failovers, recoveries of offline shards, transfers, rebalancing)."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_rebalance_deferred_total",
			Help: "Master passes that published new leaders and left rebalancing to the next pass."}),
	}
	m.failovers.WithLabelValues(failoverNewLeader)
	m.failovers.WithLabelValues(failoverOffline)
	reg.MustRegister(m.isMaster, m.term, m.failovers, m.leaderChanges, m.deferred)
	return m
}

func (m *Metrics) termStarted(term int64) {
	if m != nil {
		m.isMaster.Set(1)
		m.term.Set(float64(term))
	}
}

func (m *Metrics) rebalanceDeferred() {
	if m != nil {
		m.deferred.Inc()
	}
}

func (m *Metrics) termEnded() {
	if m != nil {
		m.isMaster.Set(0)
	}
}

// published records the leader changes of one published shard-state update.
func (m *Metrics) published(prev, next models.ShardStates, changed []int) {
	if m == nil {
		return
	}
	for _, id := range changed {
		before, after := stateOf(prev, id), stateOf(next, id)
		if after.Status == models.StatusOnline && (before.Status != models.StatusOnline || before.Leader != after.Leader) {
			m.leaderChanges.Inc()
		}
	}
}

// failedOver records the outcome for shards whose online leader was replaced.
func (m *Metrics) failedOver(prev, next models.ShardStates, changed []int) {
	if m == nil {
		return
	}
	for _, id := range changed {
		before, after := stateOf(prev, id), stateOf(next, id)
		if before.Status != models.StatusOnline {
			continue // an offline shard coming back is a recovery, not a failover
		}
		if after.Status == models.StatusOnline {
			m.failovers.WithLabelValues(failoverNewLeader).Inc()
		} else {
			m.failovers.WithLabelValues(failoverOffline).Inc()
		}
	}
}

func stateOf(ss models.ShardStates, id int) models.ShardState {
	if i := indexOf(ss, id); i >= 0 {
		return ss.Shards[i]
	}
	return models.ShardState{ID: id, Status: models.StatusOffline}
}
