package master_test

import (
	"slices"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// ledBy lists, per database, the shards node leads.
func (h *harness) ledBy(node string, dbs ...string) map[string][]int {
	out := map[string][]int{}
	for _, db := range dbs {
		for _, s := range h.etcdStates(db).Shards {
			if s.Leader == node {
				out[db] = append(out[db], s.ID)
			}
		}
	}
	return out
}

// resetQuestions forgets the failover questions asked so far.
func (h *harness) resetQuestions() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches, h.perDB = map[string][]map[string][]int{}, map[string][]string{}
}

// waitLed waits until every shard of led has a live leader other than dead.
func (h *harness) waitLed(led map[string][]int, dead string) map[string][]models.ShardState {
	h.t.Helper()
	out := map[string][]models.ShardState{}
	for db, ids := range led {
		for _, id := range ids {
			out[db] = append(out[db], h.waitShard(db, id, "re-elected", func(s models.ShardState) bool {
				return s.Leader != dead && s.Status == models.StatusOnline
			}))
		}
	}
	return out
}

func others(all []string, not ...string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(not, n) })
}

// TestFailoverRoundBatchesPerNode: a dead node that led shards of several
// databases costs each surviving replica one batched question per round,
// across databases, naming every shard of every database it is asked
// about, and no per-database question.
func TestFailoverRoundBatchesPerNode(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{})
	dbs := []string{"b1", "b2", "b3", "b4"}
	for _, db := range dbs {
		h.createDB(db, 4, 3)
	}
	victim := h.etcdStates("b1").Shards[0].Leader
	led := h.ledBy(victim, dbs...)
	require.Len(t, led, len(dbs), "leaders are spread per database: the victim leads shards of each")
	h.resetQuestions()
	h.kill(victim)
	h.waitLed(led, victim)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(t, h.perDB, "every node answers the batched question: none is asked per database")
	require.NotContains(t, h.batches, victim, "the dead node is not asked")
	for _, n := range others(nodes, victim) {
		require.NotEmpty(t, h.batches[n], "survivor %s asked", n)
		// A pass may see the dead node's databases in two rounds (one
		// whose states were still being published when the node died):
		// each round's question is still one per node, across databases.
		asked := map[string][]int{}
		widest := 0
		for _, q := range h.batches[n] {
			widest = max(widest, len(q))
			for db, ids := range q {
				for _, id := range ids {
					if !slices.Contains(asked[db], id) {
						asked[db] = append(asked[db], id)
					}
				}
			}
		}
		for db := range asked {
			slices.Sort(asked[db])
		}
		require.Equal(t, led, asked, "the questions to %s name every shard the dead node led", n)
		require.Greater(t, widest, 1, "one question to %s carries several databases' shards", n)
		require.LessOrEqual(t, len(h.batches[n]), 2, "%s asked once per round, not per database: %v", n, h.batches[n])
	}
}

// TestFailoverAsksOlderNodePerDatabase: a node that refuses the batched
// question (an older release: 404) is asked per database in the same round,
// and its answers decide as a batched answer would.
func TestFailoverAsksOlderNodePerDatabase(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	h := newHarness(t, nodes...)
	h.startMaster(masterOpts{})
	dbs := []string{"o1", "o2"}
	for _, db := range dbs {
		h.createDB(db, 3, 3)
	}
	victim := h.etcdStates("o1").Shards[0].Leader
	led := h.ledBy(victim, dbs...)
	require.Len(t, led, len(dbs))
	rest := others(nodes, victim)
	older, newer := rest[0], rest[1]
	tOld, tNew := map[string]uint64{}, map[string]uint64{}
	for db, ids := range led {
		for _, id := range ids {
			tOld[models.ShardID(db, id)], tNew[models.ShardID(db, id)] = 50, 40
		}
	}
	h.setTxn(older, tOld)
	h.setTxn(newer, tNew)
	h.mu.Lock()
	h.old[older] = true
	h.mu.Unlock()
	h.resetQuestions()
	h.kill(victim)
	for db, states := range h.waitLed(led, victim) {
		for _, s := range states {
			require.Equal(t, older, s.Leader, "%s/%d: the older node's answers (the highest txn id) count", db, s.ID)
			require.Contains(t, s.Reason, older+"=50@1")
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.batches[older], "the batched question is tried first")
	asked := slices.Sorted(slices.Values(h.perDB[older]))
	require.Equal(t, dbs, slices.Compact(asked), "the older node is asked once per database of the round")
	require.Empty(t, h.perDB[newer], "a node that answers the batch is not asked per database")
}

// TestFailoverSkipsSilentReplicaForOneRound: a live in-sync replica that
// refuses the master's last txn id question, or does not answer it within
// the round's deadline, is left out of that round's decision even with the
// most data (the shard goes to one that answered; the reason says who
// answered what), and is asked again in the next round, whose decision its
// answer then feeds.
func TestFailoverSkipsSilentReplicaForOneRound(t *testing.T) {
	for _, mode := range []string{"refuses", "hangs"} {
		t.Run(mode, func(t *testing.T) {
			nodes := []string{"n1", "n2", "n3"}
			h := newHarness(t, nodes...)
			h.startMaster(masterOpts{})
			h.createDB("quiet", 1, 3)
			first := h.etcdStates("quiet").Shards[0]
			rest := others(nodes, first.Leader)
			mute, talker := rest[0], rest[1]
			h.setTxn(mute, map[string]uint64{"quiet/0": 50})
			h.setTxn(talker, map[string]uint64{"quiet/0": 40})
			silence := map[string]map[string]bool{"refuses": h.silent, "hangs": h.hang}[mode]
			h.mu.Lock()
			silence[mute] = true
			h.mu.Unlock()
			h.kill(first.Leader)
			s := h.waitShard("quiet", 0, "re-elected", func(s models.ShardState) bool { return s.Term == first.Term+1 })
			require.Equal(t, talker, s.Leader, "the silent replica is skipped")
			require.Contains(t, s.Reason, mute+"=no answer")
			require.Contains(t, s.Reason, talker+"=40@1")
			require.Contains(t, s.Reason, "leader "+talker+" (highest last_txn_id")

			// The next round asks it again: it answers now and leads.
			h.mu.Lock()
			silence[mute] = false
			h.mu.Unlock()
			h.kill(talker)
			s = h.waitShard("quiet", 0, "re-elected again", func(s models.ShardState) bool { return s.Term == first.Term+2 })
			require.Equal(t, mute, s.Leader)
			require.Contains(t, s.Reason, mute+"=50@1", "its answer was asked for and counted")
		})
	}
}
