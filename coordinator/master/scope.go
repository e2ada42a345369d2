package master

import (
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// passScope decides which databases a reconcile pass looks at. A pass is
// woken by every publication (at 1,000 nodes, thousands of node-record
// writes and placements while databases are placed), and a pass over every
// database queued, sorted, synced and checked each of them for each one:
// O(databases) per publication for the few databases it touched. A pass
// now looks at
//
//   - the databases whose config, assignment or shard states (value or mod
//     revision) changed since the last pass, and those named by an
//     unreadable key;
//   - those still to be placed (a placement waits for nodes, a cluster's
//     readiness or the next batch, none of which is their record);
//   - those whose failover check found them not led as they should be (it
//     may ask the replicas again, or wait out a time), and those the led set
//     forgot: a node record, an in-sync set or a liveness change they read
//     (ledSet says which; what every database reads forgets all);
//   - those whose placement by this term stopped being pending;
//   - every database on the term's first pass, when the led set forgot
//     everything, after the failover grace, and once per Resync (a
//     level-triggered safety net: whatever this list misses waits at most
//     that long).
//
// Retries after failures come from the work queue as before.
type passScope struct {
	read      bool // seen holds a snapshot
	databases statemachine.Map[models.Database]
	assign    statemachine.Map[models.Assignment]
	states    statemachine.Map[models.ShardStates]
	revs      [3]statemachine.Map[int64] // mod revisions of scopeSources
	lastFull  time.Time
	full      bool            // the next pass looks at every database
	unplaced  map[string]bool // configs with shards to place
	unled     map[string]bool // failover check found shards to lead (or could not check)
	// looked counts the databases passes looked at (for the cost test).
	looked int
}

var scopeSources = [3]string{statemachine.SourceDatabaseConfig, statemachine.SourceAssign, statemachine.SourceShardState}

// names returns the databases this pass at now looks at (see passScope);
// forgot are the databases the led set forgot since the last pass and all
// whether it forgot every database.
func (p *passScope) names(st *statemachine.State, now time.Time, resync time.Duration, forgot map[string]bool, all bool) map[string]bool {
	if p.unplaced == nil {
		p.unplaced, p.unled = map[string]bool{}, map[string]bool{}
	}
	out := map[string]bool{}
	add := func(name string) { out[name] = true }
	if !p.read || p.full || all || now.Sub(p.lastFull) >= resync {
		p.lastFull, p.full = now, false
		for name := range st.Databases.All() {
			add(name)
		}
		for name := range st.Assignments.All() {
			add(name)
		}
		for name := range st.ShardStates.All() {
			add(name)
		}
		for name := range p.unled {
			add(name) // checked before, gone since: the check forgets it
		}
	} else {
		statemachine.Changed(p.databases, st.Databases, add)
		statemachine.Changed(p.assign, st.Assignments, add)
		statemachine.Changed(p.states, st.ShardStates, add)
		for i, src := range scopeSources {
			statemachine.Changed(p.revs[i], st.ModRevs[src], add)
		}
		for name := range forgot {
			add(name)
		}
		for name := range p.unplaced {
			add(name)
		}
		for name := range p.unled {
			add(name)
		}
	}
	for _, src := range scopeSources {
		for name := range st.Invalid[src] {
			add(name)
		}
	}
	p.read, p.databases, p.assign, p.states = true, st.Databases, st.Assignments, st.ShardStates
	for i, src := range scopeSources {
		p.revs[i] = st.ModRevs[src]
	}
	for name := range out {
		db, exists := st.Databases.Get(name)
		a, has := st.Assignments.Get(name)
		if exists && (!has || len(a.Shards) < db.NumShards) {
			p.unplaced[name] = true
		} else {
			delete(p.unplaced, name)
		}
		if !exists && !has && !st.ShardStates.Has(name) {
			delete(p.unled, name)
		}
	}
	p.looked += len(out)
	return out
}

// checked records the failover check's outcome for the databases it was
// given: led ones are looked at again once something they read changes.
func (p *passScope) checked(names []string, led map[string]bool) {
	for _, name := range names {
		if led[name] {
			delete(p.unled, name)
		} else {
			p.unled[name] = true
		}
	}
}
