package master

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// deadDomainInputs are the failover inputs of every database of a small
// cluster whose domain 0 died (domainState), with a view each (withView).
func deadDomainInputs(t *testing.T) (*statemachine.State, []ShardInputs) {
	st := domainState(30, 6, 16, true, 0)
	var d derived
	var ins []ShardInputs
	for _, name := range st.Assignments.Keys() {
		in, ok := d.failoverInputs(st, name)
		require.True(t, ok)
		in, ok = withView(in)
		require.True(t, ok, "%s lost leaders", name)
		ins = append(ins, in)
	}
	return st, ins
}

// TestPassViewFollowsItsInputs: a pass's view of the shards that need a
// leader is read only with the inputs it was computed from. Inputs whose
// states were published again since (the shards led anew), or whose live
// nodes changed (a new leader died), are decided on what they say, not on
// the view: a stale view would fail over shards that are led, or miss a
// dead leader.
func TestPassViewFollowsItsInputs(t *testing.T) {
	_, ins := deadDomainInputs(t)
	for _, in := range ins {
		next, changed := PlanLeaders(in)
		require.Len(t, changed, len(in.view.need), "%s: every shard of the view is decided", in.DB)

		// The states published: the same view over them has nothing to do.
		led := in
		led.States = next
		again, none := PlanLeaders(led)
		require.Empty(t, none, "%s: its shards are led since the view was read", in.DB)
		require.Equal(t, next, again)
		require.Empty(t, newRound([]ShardInputs{led}).byNode, "%s: nobody is asked about led shards", in.DB)

		// One of the new leaders died too: its shards need a leader again
		// although the view, read before, did not say so.
		victim := next.Shards[changed[0]].Leader
		dead := led
		dead.Live = in.Live.Delete(victim)
		dead.RecordedTerms, dead.SeenTerms, dead.terms = RecordedTerms(dead.Live), SeenTerms(dead.Live), nil
		var want []int
		for _, s := range next.Shards {
			if s.Leader == victim {
				want = append(want, s.ID)
			}
		}
		_, got := PlanLeaders(dead)
		require.ElementsMatch(t, want, got, "%s: the shards %s led are decided again", in.DB, victim)
	}
}

// TestPassViewDecidesAsTheInputs: decisions read through a view computed
// before the round equal those computed from the inputs with the answers,
// including a shard the view did not list whose replicas answered a term
// above its published one (a restored state the records did not show).
func TestPassViewDecidesAsTheInputs(t *testing.T) {
	st, ins := deadDomainInputs(t)
	for _, in := range ins {
		answers := map[int]map[string]models.ReplicaTxn{}
		for _, n := range in.view.need {
			answers[n.sh.ID] = map[string]models.ReplicaTxn{}
			for i, c := range n.cands {
				answers[n.sh.ID][c] = models.ReplicaTxn{LastTxnID: uint64(10*n.sh.ID + i), LastTerm: 1, Term: 1}
			}
		}
		// a shard led by a live replica, which the view does not list
		var quiet models.ShardAssignment
		for i, sh := range in.Assign.Shards {
			if len(in.view.need) == 0 || !containsNeed(in.view.need, i) {
				quiet = sh
				break
			}
		}
		answers[quiet.ID] = map[string]models.ReplicaTxn{quiet.Replicas[1]: {LastTxnID: 7, LastTerm: 4, Term: 4}}

		in.Answers = answers
		fresh := in
		fresh.view = nil
		viewed, changed := PlanLeaders(in)
		want, wantChanged := PlanLeaders(fresh)
		require.Equal(t, want, viewed, in.DB)
		require.Equal(t, wantChanged, changed, in.DB)
		require.Contains(t, changed, quiet.ID, "%s: the answer above the published term re-elects it", in.DB)
		require.Equal(t, int64(5), viewed.Shards[quiet.ID].Term, "%s: above the answered term", in.DB)
		require.Equal(t, FailoverOps(st, fresh, 1, time.Unix(0, 0)), FailoverOps(st, in, 1, time.Unix(0, 0)), in.DB)
	}
}

func containsNeed(need []shardNeed, at int) bool {
	for _, n := range need {
		if n.at == at {
			return true
		}
	}
	return false
}
