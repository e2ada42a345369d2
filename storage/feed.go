package storage

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// Feed tells shard hosts which databases' records changed, so that a host
// looks only at the databases an event touched. It compares each published
// snapshot with the previous one once, by record identity (a snapshot
// shares the records it did not change), and signals only the hosts named
// in a changed database's old or new assignment: an event costs the hosts
// O(replicas it touched), not O(hosts x databases). A storage node runs one
// for its host; `cairn simulate cluster` runs one for all its agents.
type Feed struct {
	state   func() *statemachine.State
	changed func() <-chan struct{} // closed at the next publication

	mu   sync.Mutex
	subs map[string][]*feedSub // node id -> its hosts' subscriptions
	seen *statemachine.State
	dbs  map[string]dbMark // identity of each database's records in seen
	// looked counts the databases and node records steps looked at, for
	// the cost test.
	looked int
	// gone is closed (and replaced) when a live node left or changed its
	// address in any cluster: what ends fetch sessions (Host.watchPeers).
	// A node record rewritten in place (its report, its disk use) does not
	// close it, so hosts are not woken for what cannot concern them.
	// Both signals are read without f.mu: every follower takes came before
	// each look at its leader, ~10,000 of them at once when a domain's
	// leaders fail over, and queued on f.mu behind a step (which holds it
	// for a whole publication) they held up the next step in turn, each
	// waiting to be scheduled for its hand-off of the lock.
	gone atomic.Pointer[chan struct{}]
	// came is closed (and replaced) when a node became live in any
	// cluster, or live at another address: what a follower whose leader
	// is not live waits for (besides its role changing).
	came atomic.Pointer[chan struct{}]
}

// dbMark identifies the records of one database in one snapshot.
type dbMark struct {
	assign  *models.ShardAssignment
	nAssign int
	states  *models.ShardState
	nStates int
	uid     string
	cluster string
}

func markOf(st *statemachine.State, name string) (dbMark, bool) {
	a, ok := st.Assignments.Get(name)
	if !ok {
		return dbMark{}, false
	}
	ss := st.ShardStates.At(name)
	m := dbMark{nAssign: len(a.Shards), nStates: len(ss.Shards), uid: st.Databases.At(name).UID, cluster: a.Cluster}
	if len(a.Shards) > 0 {
		m.assign = &a.Shards[0]
	}
	if len(ss.Shards) > 0 {
		m.states = &ss.Shards[0]
	}
	return m, true
}

// feedSub is one host's subscription: the databases changed since it last
// looked, or all of them (its first look).
type feedSub struct {
	node    string
	ch      chan struct{} // signalled (coalesced) when pending grows
	mu      sync.Mutex
	all     bool
	pending map[string]bool
}

// NewFeed builds a feed over a state manager's snapshots and its change
// signal (Manager.Changed); Run drives it.
func NewFeed(state func() *statemachine.State, changed func() <-chan struct{}) *Feed {
	f := &Feed{state: state, changed: changed, subs: map[string][]*feedSub{}, dbs: map[string]dbMark{}}
	gone, came := make(chan struct{}), make(chan struct{})
	f.gone.Store(&gone)
	f.came.Store(&came)
	return f
}

// renew replaces a signal with a fresh channel and closes the one it held:
// a reader that took the old one is woken, one that reads it now waits
// for the next change.
func renew(sig *atomic.Pointer[chan struct{}]) {
	ch := make(chan struct{})
	close(*sig.Swap(&ch))
}

// peersGone is closed at the next snapshot in which a live node of any
// cluster left or moved to another address.
func (f *Feed) peersGone() <-chan struct{} { return *f.gone.Load() }

// peersCame is closed at the next snapshot in which a node of any cluster
// became live, or live at another address.
func (f *Feed) peersCame() <-chan struct{} { return *f.came.Load() }

// noteNodes closes gone when a live node in prev is absent from st or at
// another address there, and came when a live node in st is absent from
// prev or at another address there: once per change of the live nodes,
// O(live nodes), for every host of the process (each host then looks only
// at its own sessions and waiting followers). Under f.mu.
func (f *Feed) noteNodes(prev, st *statemachine.State) {
	if prev == nil || st.Nodes.Same(prev.Nodes) {
		return
	}
	left, came := false, false
	note := func(was, now statemachine.Map[models.StorageNode]) func(string) {
		return func(id string) {
			f.looked++
			w, inWas := was.Get(id)
			n, inNow := now.Get(id)
			moved := inWas && inNow && w.NodeAddress != n.NodeAddress
			left = left || (inWas && !inNow) || moved
			came = came || (inNow && !inWas) || moved
		}
	}
	// Only the records that changed since prev are looked at: a node record
	// rewritten in place (its report) costs its own check, not one per node.
	for cluster, was := range prev.Nodes.All() {
		if now := st.Nodes.At(cluster); !now.Same(was) {
			statemachine.Changed(was, now, note(was, now))
		}
	}
	for cluster, now := range st.Nodes.All() {
		if !prev.Nodes.Has(cluster) {
			came = came || now.Len() > 0
		}
	}
	if left {
		renew(&f.gone)
	}
	if came {
		renew(&f.came)
	}
}

// Run compares every new snapshot with the previous one until ctx ends.
func (f *Feed) Run(ctx context.Context) {
	for {
		changed := f.changed()
		f.step()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// step notes what changed between the last snapshot seen and the current one.
func (f *Feed) step() {
	st := f.state()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noteNodes(f.seen, st)
	if f.seen != nil && st.Assignments.Same(f.seen.Assignments) && st.ShardStates.Same(f.seen.ShardStates) &&
		st.Databases.Same(f.seen.Databases) {
		f.seen = st
		return // no database record changed
	}
	prev := f.seen
	f.seen = st
	// The databases whose records changed since prev (all at first): a
	// snapshot costs the records it changed, not one look per database.
	var touched []string
	look := func(name string) {
		f.looked++
		m, ok := markOf(st, name)
		old, had := f.dbs[name]
		switch {
		case !ok && had:
			delete(f.dbs, name)
		case !ok || (had && old == m):
			return
		default:
			f.dbs[name] = m
		}
		touched = append(touched, name)
	}
	if prev == nil {
		for name := range st.Assignments.All() {
			look(name)
		}
	} else {
		seen := map[string]bool{}
		once := func(name string) {
			if !seen[name] {
				seen[name] = true
				look(name)
			}
		}
		statemachine.Changed(prev.Assignments, st.Assignments, once)
		statemachine.Changed(prev.ShardStates, st.ShardStates, once)
		statemachine.Changed(prev.Databases, st.Databases, once)
	}
	for _, name := range touched {
		nodes := map[string]bool{}
		for _, s := range [2]*statemachine.State{prev, st} {
			if s == nil {
				continue
			}
			for _, sh := range s.Assignments.At(name).Shards {
				for _, n := range sh.Replicas {
					nodes[n] = true
				}
			}
		}
		for n := range nodes {
			for _, sub := range f.subs[n] {
				sub.add(name)
			}
		}
	}
}

func (s *feedSub) add(name string) {
	s.mu.Lock()
	s.pending[name] = true
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// take returns what changed since the last take (all: look at everything).
func (s *feedSub) take() (all bool, names map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, names = s.all, s.pending
	s.all, s.pending = false, map[string]bool{}
	return all, names
}

// subscribe registers a host of node; its first take says all.
func (f *Feed) subscribe(node string) *feedSub {
	s := &feedSub{node: node, ch: make(chan struct{}, 1), all: true, pending: map[string]bool{}}
	s.ch <- struct{}{}
	f.mu.Lock()
	f.subs[node] = append(f.subs[node], s)
	f.mu.Unlock()
	return s
}

func (f *Feed) unsubscribe(s *feedSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	subs := f.subs[s.node]
	for i, x := range subs {
		if x == s {
			f.subs[s.node] = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(f.subs[s.node]) == 0 {
		delete(f.subs, s.node)
	}
}
