package simcluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// membership follows the live agents of one storage cluster in the agents'
// state store, from every publication, and remembers when the live set last
// changed: the master's rebalance delay starts over from such a change, so
// its plan and leader spreading come that long after it.
type membership struct {
	delay  time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changed time.Time // the last change of the live set (zero: none seen)
	changes int
}

// watchMembership follows cluster's live nodes in sm until stop.
func watchMembership(sm *statemachine.Manager, cluster string, delay time.Duration) *membership {
	ctx, cancel := context.WithCancel(context.Background())
	m := &membership{delay: delay, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		prev := sm.Snapshot().Nodes.At(cluster)
		for {
			changed := sm.Changed()
			now := sm.Snapshot().Nodes.At(cluster)
			if m.differ(prev, now) {
				m.mu.Lock()
				m.changed = time.Now()
				m.changes++
				m.mu.Unlock()
			}
			prev = now
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return m
}

// differ: a node is live in one of prev and now only (a record rewritten
// in place is no change of the set).
func (m *membership) differ(prev, now statemachine.Map[models.StorageNode]) bool {
	if prev.Same(now) {
		return false
	}
	differ := false
	statemachine.Changed(prev, now, func(id string) {
		differ = differ || prev.Has(id) != now.Has(id)
	})
	return differ
}

// calm is the later of after and the last change of the live set plus the
// rebalance delay.
func (m *membership) calm(after time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed.IsZero() {
		return after
	}
	return later(after, m.changed.Add(m.delay))
}

// String says how often the live set changed, for the progress lines.
func (m *membership) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changes == 0 {
		return "the live set did not change after every agent registered"
	}
	return fmt.Sprintf("the live set changed %d times after every agent registered, last %s ago (the master's rebalance delay starts over then)",
		m.changes, time.Since(m.changed).Round(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *membership) stop() {
	m.cancel()
	<-m.done
}
