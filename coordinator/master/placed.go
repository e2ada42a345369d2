package master

import (
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// placedWait bounds how long a placement of this term stays out of the
// pass waiting for the local state to show it (a watch that never reaches
// the revision, as after a restore into another etcd): past it the database
// is synced as any other, on what the state says, its writes still guarded.
const placedWait = 10 * time.Second

// placeCoalesce: while a batch this term placed is not shown by the local
// state yet, new databases wait this long after it, so that they are placed
// together. When the watch keeps up, a batch is seen sooner and the next
// one goes as soon as it is (batches grow with the watch's delay, as group
// commit does, and storage nodes rewrite their records once per batch, not
// once per database); when it lags, placement goes on every placeCoalesce
// instead of waiting for it.
const placeCoalesce = 250 * time.Millisecond

// placeDeferred reports whether a placement batch must wait for the one
// before it (placeCoalesce).
func (m *Master) placeDeferred() bool {
	return len(m.placed) > 0 && m.cfg.Now().Sub(m.lastPlaced) < placeCoalesce
}

// nextWake is the earliest time the loop must run a pass without an event:
// a database's retry, or the next placement batch.
func (m *Master) nextWake() (time.Time, bool) {
	at, ok := m.queue.Next()
	if len(m.placed) > 0 {
		p := m.lastPlaced.Add(placeCoalesce)
		if !ok || p.Before(at) {
			at, ok = p, true
		}
	}
	return at, ok
}

// ownPlacement is a placement of new shards this term wrote at rev: the
// database's assignment and states, as written.
type ownPlacement struct {
	rev    int64
	at     time.Time // when it was written
	db     models.Database
	assign models.Assignment
	states models.ShardStates
}

// shown reports whether st has seen the placement's txn in both sources it
// wrote (an assignment and its states are seen together, or not at all).
func (p ownPlacement) shown(st *statemachine.State) bool {
	return st.Revisions[statemachine.SourceAssign] >= p.rev && st.Revisions[statemachine.SourceShardState] >= p.rev
}

// prunePlaced forgets the placements st shows, and those waited for too
// long, and returns their databases.
func (m *Master) prunePlaced(st *statemachine.State) []string {
	now := m.cfg.Now()
	var pruned []string
	for name, p := range m.placed {
		if p.shown(st) || now.Sub(p.at) >= placedWait {
			delete(m.placed, name)
			pruned = append(pruned, name)
		}
	}
	return pruned
}

// withoutPending drops from names the databases whose placement by this term the
// state does not show yet.
func (m *Master) withoutPending(names []string) []string {
	if len(m.placed) == 0 {
		return names
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if _, ok := m.placed[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}
