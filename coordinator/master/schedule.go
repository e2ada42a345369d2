package master

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/coordinator/placement"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// Membership is what the master remembers of one storage cluster's live set
// between decisions: its signature (sorted node ids), since when it has been
// that, and the signature at which a plan last had nothing to relocate.
type Membership struct {
	Sig      string
	Since    time.Time
	Balanced string
}

// TrackMembership folds one observation of a cluster's live node set (sig)
// at now into mb (seen false at first sight in a term: taken as stable from
// now), and says whether a placement plan is due: the set differs from the
// one last found balanced and has not changed for delay.
func TrackMembership(mb Membership, seen bool, sig string, now time.Time, delay time.Duration) (Membership, bool) {
	if !seen {
		mb = Membership{Sig: sig, Since: now}
	} else if mb.Sig != sig {
		mb.Sig, mb.Since = sig, now
	}
	return mb, mb.Balanced != sig && now.Sub(mb.Since) >= delay
}

// MembershipSig is the signature of a cluster's live set in st.
func MembershipSig(st *statemachine.State, cluster string) string {
	return strings.Join(st.Nodes.At(cluster).Keys(), ",")
}

// Input is everything Schedule reads: a state snapshot, the time and what
// the master remembers between decisions. No etcd, no clock.
type Input struct {
	State *statemachine.State
	Now   time.Time
	// Delay is --rebalance-delay: membership must be stable this long
	// before replicas move to new nodes or off vanished ones, and before
	// leaders spread.
	Delay time.Duration
	// Members per storage cluster, already updated with TrackMembership at
	// Now (a cluster missing here counts as first seen at Now).
	Members map[string]Membership
	// InFlight are the operators being carried out; no new plan is made
	// while any runs.
	InFlight []Operator
	// Forced: a rebalance was asked for (POST /rebalance).
	Forced bool
	// MaxMoves caps the leader transfers of one spreading decision per
	// database; default 16.
	MaxMoves int
	// SpreadSkip: clusters whose inputs did not change since spreading last
	// found nothing to do.
	SpreadSkip map[string]bool
	// MasterTerm and the time stamp the operators made.
	MasterTerm int64
	// counts: the master's replica counts kept across decisions (nil: a
	// fresh one, which reads every shard).
	counts *replicaCounts
}

// Decision is the output of Schedule: operators, as data.
type Decision struct {
	// Plan: a new placement plan's moves and leader transfers, persisted
	// before they run and carried out step by step.
	Plan []Operator
	// Spread: leader transfers that spread leaders once nothing else runs.
	Spread []Operator
	// Planned: a plan was made (Plan may still be empty).
	Planned bool
	// Balanced: the clusters a plan was made for that relocates nothing (the
	// master remembers their membership as balanced).
	Balanced []string
	// Relocations and LowerBound of the plan (see placement.Sharder).
	Relocations, LowerBound int
	// Err: no plan could be made (not enough nodes...).
	Err error
}

// Operators lists every operator of the decision.
func (d Decision) Operators() []Operator { return slices.Concat(d.Plan, d.Spread) }

// Schedule decides, purely from its input, how the master rebalances: a
// placement plan when one is due (asked for, a drain holding replicas, a
// replica count off its factor, or a membership change stable for Delay)
// and nothing else runs, else leader spreading. The failover of dead leaders
// is the reconcile pass's (Master.failover, FailoverOps).
func Schedule(in Input) Decision {
	st := in.State
	var d Decision
	if len(in.InFlight) > 0 {
		return d
	}
	if planDue(in) {
		d.Plan, d.Balanced, d.Relocations, d.LowerBound, d.Err = PlanOps(st, in.MasterTerm, in.Now)
		d.Planned = d.Err == nil
		if d.Err != nil || len(d.Plan) > 0 {
			return d
		}
	}
	terms := map[string]map[string]int64{} // per cluster, computed once for all its databases
	seenTerms := map[string]map[string]int64{}
	// Spreading waits for a cluster's membership to be stable for Delay
	// (SpreadLeaders, with the same Since as below): until then none of its
	// databases is looked at. After a dead domain that is the delay its
	// survivors take to settle, each quiet pass of which walked every
	// database (~0.13 s of the master's loop at 1,000 databases x 32
	// shards) to decide nothing.
	stable := map[string]bool{} // per cluster
	var spread []string         // a pass per publication: the skipped clusters' databases cost a lookup each, not a sort
	for db, a := range st.Assignments.All() {
		if in.SpreadSkip[a.Cluster] {
			continue
		}
		ok, known := stable[a.Cluster]
		if !known {
			mb, seen := in.Members[a.Cluster]
			if !seen {
				mb.Since = in.Now
			}
			ok = in.Now.Sub(mb.Since) >= in.Delay
			stable[a.Cluster] = ok
		}
		if ok {
			spread = append(spread, db)
		}
	}
	slices.Sort(spread)
	for _, db := range spread {
		a := st.Assignments.At(db)
		mb, seen := in.Members[a.Cluster]
		if !seen {
			mb.Since = in.Now
		}
		if _, exists := st.Databases.Get(db); !exists || !ClusterReady(st, a.Cluster) {
			continue
		}
		if terms[a.Cluster] == nil {
			terms[a.Cluster] = RecordedTerms(st.Nodes.At(a.Cluster))
			seenTerms[a.Cluster] = SeenTerms(st.Nodes.At(a.Cluster))
		}
		next, changed := SpreadLeaders(SpreadInput{
			ShardInputs: ShardInputs{DB: db, Assign: a, States: st.ShardStates.At(db), Live: st.Nodes.At(a.Cluster), ISR: st.ISR.At(a.Cluster), Drains: st.Drains,
				ClusterID: st.ListedFrom[statemachine.ClusterISRSource(a.Cluster)], RecordedTerms: terms[a.Cluster], SeenTerms: seenTerms[a.Cluster]},
			StableSince: mb.Since, Now: in.Now, Delay: in.Delay, MaxMoves: cmpOr(in.MaxMoves, 16),
		})
		for _, id := range changed {
			s := next.Shards[indexOf(next, id)]
			d.Spread = append(d.Spread, Operator{DB: db, Shard: id, Kind: OpLeader, Leader: s.Leader, FromLeader: st.ShardStates.At(db).Shards[indexOf(st.ShardStates.At(db), id)].Leader,
				Step: StepLeader, MasterTerm: in.MasterTerm, Created: in.Now})
		}
	}
	return d
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// planDue: see Schedule.
func planDue(in Input) bool {
	if in.Forced {
		return true
	}
	st := in.State
	for name := range st.StorageClusters {
		mb, seen := in.Members[name]
		if !seen {
			continue // first seen now: stable for 0
		}
		if mb.Balanced != mb.Sig && in.Now.Sub(mb.Since) >= in.Delay {
			return true
		}
	}
	for id := range st.Drains {
		for _, a := range st.Assignments.All() {
			for _, sh := range a.Shards {
				if slices.Contains(sh.Replicas, id) {
					return true
				}
			}
		}
	}
	if in.counts == nil {
		in.counts = &replicaCounts{}
	}
	return in.counts.anyOff(st)
}

// replicaCounts keeps the databases with a shard whose replica count is off
// their factor, brought up to date with the databases whose assignment or
// config changed since the last look: a rebalance decision on every pass
// (each publication) must not read every shard of the cluster.
type replicaCounts struct {
	read   bool
	assign statemachine.Map[models.Assignment]
	dbs    statemachine.Map[models.Database]
	off    map[string]bool
}

func (c *replicaCounts) anyOff(st *statemachine.State) bool {
	check := func(name string) {
		delete(c.off, name)
		a, has := st.Assignments.Get(name)
		db, ok := st.Databases.Get(name)
		if !has || !ok {
			return
		}
		for _, sh := range a.Shards {
			if len(sh.Replicas) != db.ReplicaFactor {
				c.off[name] = true
				return
			}
		}
	}
	if !c.read {
		c.off = map[string]bool{}
		for name := range st.Assignments.All() {
			check(name)
		}
	} else {
		statemachine.Changed(c.assign, st.Assignments, check)
		statemachine.Changed(c.dbs, st.Databases, check)
	}
	c.read, c.assign, c.dbs = true, st.Assignments, st.Databases
	return len(c.off) > 0
}

// FailoverOps turns PlanLeaders' decision for one database (with the
// replicas' answers the executor asked for) into operators.
func FailoverOps(st *statemachine.State, in ShardInputs, term int64, now time.Time) []Operator {
	db := in.DB
	next, changed := PlanLeaders(in)
	if len(changed) == 0 {
		return nil
	}
	prevs := st.ShardStates.At(db) // st.ShardState(db, id), the database looked up once
	ops := make([]Operator, 0, len(changed))
	for _, id := range changed {
		s := next.Shards[indexOf(next, id)]
		o := Operator{DB: db, Shard: id, Kind: OpFailover, Leader: s.Leader, Term: s.Term, Step: StepPublish, MasterTerm: term, Created: now, Reason: s.Reason}
		if i := indexOf(prevs, id); i >= 0 {
			o.FromLeader = prevs.Shards[i].Leader
		}
		if s.Status != models.StatusOnline {
			o.Kind = OpOffline
		}
		ops = append(ops, o)
	}
	return ops
}

// PlanOps is placement's plan for every ready cluster as operators: a move
// for each shard whose replicas change (ending with the plan's leader), a
// leader transfer for each shard whose leader alone changes.
func PlanOps(st *statemachine.State, term int64, now time.Time) (ops []Operator, balanced []string, relocations, lowerBound int, err error) {
	for _, name := range slices.Sorted(maps.Keys(st.StorageClusters)) {
		c := clusterView(st, name)
		if len(c.Shards) == 0 || !ClusterReady(st, name) {
			continue
		}
		p, sharder, err := planFor(c)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		relocations += p.Relocations
		if p.Relocations == 0 {
			balanced = append(balanced, name) // and the bound is 0
		} else {
			lowerBound += sharder.LowerBound()
		}
		keys := slices.Collect(maps.Keys(p.Target))
		slices.SortFunc(keys, func(a, b placement.ShardKey) int {
			return compareOps(Operator{DB: a.DB, Shard: a.Shard}, Operator{DB: b.DB, Shard: b.Shard})
		})
		for _, k := range keys {
			t := p.Target[k]
			cur := assigned(st, k)
			s, _ := st.ShardState(k.DB, k.Shard)
			o := Operator{DB: k.DB, Shard: k.Shard, From: slices.Clone(cur), To: slices.Clone(t.Replicas), FromLeader: s.Leader, MasterTerm: term, Created: now}
			if s.Status != models.StatusOnline {
				o.FromLeader = ""
			}
			if t.Leader != "" && t.Leader != s.Leader {
				o.Leader = t.Leader
			}
			switch {
			case !sameSet(cur, t.Replicas):
				o.Kind = OpMove
			case o.Leader != "":
				o.Kind, o.From, o.To = OpLeader, nil, nil
			default:
				continue
			}
			o.Step = NextStep(o, st)
			if o.Step == StepDone || o.Step == StepCancel {
				continue // a leader the state does not allow yet: nothing would run
			}
			ops = append(ops, o)
		}
	}
	return ops, balanced, relocations, lowerBound, nil
}
