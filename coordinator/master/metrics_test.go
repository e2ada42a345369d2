package master_test

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/models"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The master's metrics follow a shard through a failover, going offline and
// coming back, and the term through its end.
func TestMasterMetrics(t *testing.T) {
	h := newHarness(t, "n1", "n2")
	reg := prometheus.NewRegistry()
	mm := master.NewMetrics(reg)
	rm := h.startMaster(masterOpts{metrics: mm})
	value := func(name string, labels ...string) func() float64 {
		return func() float64 {
			mfs, err := reg.Gather()
			require.NoError(t, err)
			for _, mf := range mfs {
				if mf.GetName() != name {
					continue
				}
				for _, m := range mf.GetMetric() {
					if len(labels) == 0 || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == labels[0]) {
						if m.GetGauge() != nil {
							return m.GetGauge().GetValue()
						}
						return m.GetCounter().GetValue()
					}
				}
			}
			return -1
		}
	}
	waitValue := func(want float64, get func() float64, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return get() == want }, 10*time.Second, 10*time.Millisecond, "%s never reached %v (is %v)", what, want, get())
	}
	waitValue(1, value("cairn_master_is_master"), "is_master")
	require.Equal(t, float64(rm.term), value("cairn_master_term")())

	h.createDB("m", 1, 2)
	s, _ := h.sm.Snapshot().ShardState("m", 0)
	a := s.Leader
	b := notExpected(a, "n1", "n2")
	require.Zero(t, value("cairn_master_failovers_total", "new_leader")())
	deferred := value("cairn_master_rebalance_deferred_total")()
	require.GreaterOrEqual(t, deferred, 0.0)

	h.kill(a)
	h.waitShard("m", 0, "b leads", func(s models.ShardState) bool { return s.Leader == b && s.Status == models.StatusOnline })
	waitValue(1, value("cairn_master_failovers_total", "new_leader"), "failovers{new_leader}")
	// The pass that published b left rebalancing to the next one.
	require.Eventually(t, func() bool { return value("cairn_master_rebalance_deferred_total")() > deferred }, 10*time.Second, 10*time.Millisecond,
		"no pass left rebalancing to the next")
	waitValue(1, value("cairn_master_leader_changes_total"), "leader changes")
	h.writeISR("m", 0, models.ISR{Leader: b, Term: 2, Replicas: []string{b}})

	h.kill(b)
	h.waitShard("m", 0, "offline", func(s models.ShardState) bool { return s.Status == models.StatusOffline })
	waitValue(1, value("cairn_master_failovers_total", "offline"), "failovers{offline}")

	h.register(b, nil)
	h.waitShard("m", 0, "b back", func(s models.ShardState) bool { return s.Status == models.StatusOnline })
	waitValue(2, value("cairn_master_leader_changes_total"), "leader changes after recovery")
	require.Equal(t, 1.0, value("cairn_master_failovers_total", "new_leader")(), "a recovery is not a failover")

	rm.stop()
	require.Equal(t, 0.0, value("cairn_master_is_master")())
	require.Equal(t, float64(rm.term), value("cairn_master_term")(), "the last term held stays")
}
