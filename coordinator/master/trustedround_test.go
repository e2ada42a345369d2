package master_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// trustedPatience is the TrustedAskTimeout the masters of these tests run
// with (AskTimeout 500ms): above the Config's default (50ms), so that the
// answer of a node that answers at once is in on a loaded machine.
const trustedPatience = 150 * time.Millisecond

// fullSetShard starts a master (the Config's own trusted patience) over
// nodes, creates db with one shard on all of them, and records its in-sync
// set as every node at the shard's first term.
func fullSetShard(t *testing.T, db string, nodes []string) (*harness, models.ShardState, string) {
	t.Helper()
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{trustedAsk: trustedPatience})
	h.createDB(db, 1, 3)
	first := h.etcdStates(db).Shards[0]
	id := models.ShardID(db, 0)
	h.writeISR(db, 0, models.ISR{Leader: first.Leader, Term: first.Term, Replicas: nodes})
	h.eventually("in-sync set loaded", func(st *statemachine.State) bool {
		return len(st.ISR.At(cluster).At(id).Replicas) == len(nodes)
	})
	return h, first, id
}

// TestTrustedFailoverRoundEndsAtPatience: the dead leader's shard has a
// trusted in-sync set (at its term, no replica holding a newer one), so every
// member holds every acknowledged write: the round ends at the trusted
// patience although a member, with the longer log, would answer only after
// AskTimeout; the member that answered leads at the next term.
func TestTrustedFailoverRoundEndsAtPatience(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h, first, id := fullSetShard(t, "tr", nodes)
	rest := others(nodes, first.Leader)
	late, quick := rest[0], rest[1]
	h.setTxn(late, map[string]uint64{id: 50})
	h.setTxn(quick, map[string]uint64{id: 40})
	h.mu.Lock()
	h.slow[late] = 2 * time.Second // well after AskTimeout
	h.left = map[string][]time.Duration{}
	h.mu.Unlock()

	h.kill(first.Leader)
	s := h.waitShard("tr", 0, "re-elected", func(s models.ShardState) bool { return s.Term == first.Term+1 })
	require.Equal(t, quick, s.Leader, "the live in-sync replica that answered within the patience")
	require.Equal(t, models.StatusOnline, s.Status)
	require.Contains(t, s.Reason, late+"=no answer")
	require.Contains(t, s.Reason, quick+"=40@1")

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.left[late], "the late member was asked")
	for _, left := range h.left[late] {
		require.LessOrEqual(t, left, trustedPatience, "its question ends with the round, at the patience, not at AskTimeout")
	}
}

// TestStaleSetRoundWaitsTheFullTimeout: a shard whose in-sync set is stale
// (a live replica's log holds a newer term than the set's) must hear every
// replica: its round keeps the full AskTimeout, and the replica answering
// after the trusted patience (but within AskTimeout) is heard and, holding
// the newest log, leads above every term. Cut at the patience, the shard
// would wait for it round after round.
func TestStaleSetRoundWaitsTheFullTimeout(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h, first, id := fullSetShard(t, "st", nodes)
	late := others(nodes, first.Leader)[0]
	h.setTxn(first.Leader, map[string]uint64{id: 50})
	h.setTxn(late, map[string]uint64{id: 60})
	h.mu.Lock()
	h.slow[late] = 2 * trustedPatience // after the patience, within AskTimeout
	h.left = map[string][]time.Duration{}
	h.mu.Unlock()

	// late's log holds a term the set never saw: the set is stale, and the
	// published term is below it.
	h.setMaxTerm(late, map[string]int64{id: first.Term + 1})
	s := h.waitShard("st", 0, "re-elected above the replicas' terms", func(s models.ShardState) bool { return s.Term > first.Term+1 })
	require.Equal(t, late, s.Leader, "the replica heard after the patience holds the newest log")
	require.Equal(t, first.Term+2, s.Term)
	require.Contains(t, s.Reason, fmt.Sprintf("%s=60@%d", late, first.Term+1))

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.left[late])
	for _, left := range h.left[late] {
		require.Greater(t, left, 2*trustedPatience, "a round with a stale set gives each question the full AskTimeout")
	}
}
