package master

import (
	"maps"
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// ledSet remembers the databases whose every shard was found led as it
// should be. The check is a pure function of the state (and of moved nodes,
// whose databases are never remembered), so a database is checked again
// only once something it reads changed: its own assignment, states or
// in-sync sets, the terms the live nodes' records hold for its shards, or
// whether a node assigned one of its replicas is live or takes writes (the
// rules read no other node). What every database reads (a node moving,
// drains, the storage clusters, a re-list) forgets them all. While
// databases are placed, each placement and node report then costs the
// master the databases it touched, where any event made it check every
// shard of the cluster again (32,000 at 1,000 nodes, on every pass); a
// node lost costs the databases it leads a shard of (a dead domain at
// 1,000 nodes: the ~380 of 1,000 databases whose shards need a leader).
type ledSet struct {
	seen *statemachine.State
	revs map[string]int64 // seen's revisions, as they were
	dbs  map[string]bool
	// replicaOf is, per cluster and node, the databases assigned a replica
	// on it, as of the assignments idxOf (built when a node's liveness
	// first changes on a version of them).
	idxOf     statemachine.Map[models.Assignment]
	replicaOf map[string]map[string][]replicaAt
	// forgot: the databases forgotten since drained last, and forgotAll
	// whether every one was (the pass's scope reads them, passScope).
	forgot    map[string]bool
	forgotAll bool
}

// drain returns and clears what was forgotten since the last call.
func (l *ledSet) drain() (forgot map[string]bool, all bool) {
	forgot, all = l.forgot, l.forgotAll
	l.forgot, l.forgotAll = nil, false
	return forgot, all
}

// sync forgets the databases whose inputs differ between the state last
// synced and st.
func (l *ledSet) sync(st *statemachine.State) {
	prev, revs := l.seen, l.revs
	l.seen, l.revs = st, maps.Clone(st.Revisions)
	switch {
	case l.dbs == nil || prev == nil:
		l.dbs, l.forgotAll = map[string]bool{}, true
	case maps.Equal(revs, st.Revisions):
	case len(l.dbs) == 0:
	case !l.forgetChanged(prev, revs, st):
		l.dbs, l.forgotAll = map[string]bool{}, true
	}
}

// perDatabase: a source whose events concern the databases they name (or
// none: the failover check does not read database configs nor brokers).
func perDatabase(src string) bool {
	switch src {
	case statemachine.SourceAssign, statemachine.SourceShardState, statemachine.SourceDatabaseConfig,
		statemachine.SourceBrokers, statemachine.SourceMaster:
		return true
	}
	return strings.HasPrefix(src, statemachine.ClusterNodesSource("")) || strings.HasPrefix(src, statemachine.ClusterISRSource(""))
}

// forgetChanged forgets the databases whose inputs changed from prev (whose
// revisions were revs) to st; false when an input of every database did.
func (l *ledSet) forgetChanged(prev *statemachine.State, revs map[string]int64, st *statemachine.State) bool {
	for src, rev := range st.Revisions {
		if revs[src] != rev && !perDatabase(src) {
			return false
		}
	}
	for src := range revs {
		if _, ok := st.Revisions[src]; !ok {
			return false
		}
	}
	if prev.FromBackup != st.FromBackup || !maps.Equal(prev.Synced, st.Synced) || !maps.Equal(prev.ListedFrom, st.ListedFrom) {
		return false
	}
	forget := func(db string) {
		if l.dbs[db] {
			delete(l.dbs, db)
			if l.forgot == nil {
				l.forgot = map[string]bool{}
			}
			l.forgot[db] = true
		}
	}
	forgetShard := func(id string) {
		if db, _, err := models.ParseShardID(id); err == nil {
			forget(db)
		}
	}
	statemachine.Changed(prev.Assignments, st.Assignments, forget)
	statemachine.Changed(prev.ShardStates, st.ShardStates, forget)
	statemachine.Changed(prev.ISR, st.ISR, func(cluster string) {
		statemachine.Changed(prev.ISR.At(cluster), st.ISR.At(cluster), forgetShard)
	})
	wide := false
	statemachine.Changed(prev.Nodes, st.Nodes, func(cluster string) {
		was, now := prev.Nodes.At(cluster), st.Nodes.At(cluster)
		statemachine.Changed(was, now, func(id string) {
			a, inWas := was.Get(id)
			b, inNow := now.Get(id)
			if inWas && inNow && a.NodeAddress != b.NodeAddress {
				wide = true
				return
			}
			switch {
			case inWas && (!inNow || a.Writable() && !b.Writable()):
				// Lost or fenced off writes: only a shard it leads can
				// need a leader now (a shard whose live leader takes
				// writes needs none, whoever of its followers is lost;
				// one whose leader is fenced needs one only once a
				// follower can take writes).
				for _, db := range l.ledBy(st, cluster, id) {
					forget(db)
				}
			case inWas != inNow || a.Writable() != b.Writable():
				for _, db := range l.databasesOf(st.Assignments, cluster, id) {
					forget(db)
				}
			}
			// A new or changed record's terms may be above a shard's;
			// a record gone only takes terms away (the rules ask whether
			// a live record holds one above the published term).
			if inNow {
				termsChanged(a.MaxTerm, b.MaxTerm, forgetShard)
				termsChanged(a.SeenTerm, b.SeenTerm, forgetShard)
			}
		})
	})
	return !wide
}

// databasesOf lists the databases of cluster with a replica assigned on
// node, in assign, each once.
func (l *ledSet) databasesOf(assign statemachine.Map[models.Assignment], cluster, node string) []string {
	var dbs []string
	for _, r := range l.replicasOf(assign, cluster, node) {
		if len(dbs) == 0 || dbs[len(dbs)-1] != r.db {
			dbs = append(dbs, r.db)
		}
	}
	return dbs
}

// replicaAt is a replica assigned on a node: its database and shard.
type replicaAt struct {
	db    string
	shard int
}

// replicasOf lists the replicas assigned on node in cluster, in assign,
// grouped by database (an index built once per version of the
// assignments, when a node's liveness first changes on it).
func (l *ledSet) replicasOf(assign statemachine.Map[models.Assignment], cluster, node string) []replicaAt {
	if l.replicaOf == nil || !assign.Same(l.idxOf) {
		l.idxOf, l.replicaOf = assign, map[string]map[string][]replicaAt{}
		for db, a := range assign.All() {
			nodes := l.replicaOf[a.Cluster]
			if nodes == nil {
				nodes = map[string][]replicaAt{}
				l.replicaOf[a.Cluster] = nodes
			}
			for _, sh := range a.Shards {
				for _, n := range sh.Replicas {
					nodes[n] = append(nodes[n], replicaAt{db: db, shard: sh.ID})
				}
			}
		}
	}
	return l.replicaOf[cluster][node]
}

// ledBy lists the remembered databases with a shard that node is assigned
// a replica of and that st names it leader of, each once (a replica not
// assigned on node is never led by it in a database the led set
// remembers).
func (l *ledSet) ledBy(st *statemachine.State, cluster, node string) []string {
	var dbs []string
	var ss models.ShardStates
	var ssOf string
	for _, r := range l.replicasOf(st.Assignments, cluster, node) {
		if !l.dbs[r.db] || len(dbs) > 0 && dbs[len(dbs)-1] == r.db {
			continue
		}
		if ssOf != r.db {
			ss, ssOf = st.ShardStates.At(r.db), r.db
		}
		if s, ok := shardStateOf(ss, r.shard); ok && s.Leader == node {
			dbs = append(dbs, r.db)
		}
	}
	return dbs
}

// termsChanged calls changed with each shard id whose term differs between
// two versions of a node record's terms.
func termsChanged(was, now map[string]int64, changed func(id string)) {
	for id, t := range now {
		if w, ok := was[id]; !ok || w != t {
			changed(id)
		}
	}
	for id := range was {
		if _, ok := now[id]; !ok {
			changed(id)
		}
	}
}
