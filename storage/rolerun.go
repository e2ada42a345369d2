package storage

import (
	"context"
	"sync"
	"time"
)

// roleRun is one role of a replica (a term as leader or follower) from
// setDesired to the next change. Its work runs in goroutines only while there
// is work: waiting holds none. A follower parked in its leader's fetch
// session is a member of the session, which starts the follower's next step
// when it hands the shard back; a leader between two in-sync upkeeps is a
// timer. A node hosts tens of thousands of replicas at 1,000 nodes, and a
// goroutine each (with its stack, 4-8 KiB once it has called into etcd) was
// most of the memory of the node.
type roleRun struct {
	role   role
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	steps   sync.WaitGroup // steps running now; Add only under mu while not stopped
	// Leader upkeep: upkeep is nil until the first in-sync set is published
	// (a kick before then makes the first upkeep run at once); busy while
	// one runs, again when it was kicked meanwhile.
	upkeep              *time.Timer
	upkeepDue           time.Time // when upkeep fires
	upkeepRun           func(ctx context.Context)
	kicked, busy, again bool
}

func newRoleRun(ro role) *roleRun {
	ctx, cancel := context.WithCancel(context.Background())
	return &roleRun{role: ro, ctx: ctx, cancel: cancel}
}

// enter registers a step about to run in the calling goroutine; false once
// the role stopped (the step must not run). Pair it with exit.
func (rr *roleRun) enter() bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.stopped {
		return false
	}
	rr.steps.Add(1)
	return true
}

func (rr *roleRun) exit() { rr.steps.Done() }

// goStep runs step in a new goroutine unless the role stopped.
func (rr *roleRun) goStep(step func(ctx context.Context)) {
	if !rr.enter() {
		return
	}
	go func() {
		defer rr.exit()
		step(rr.ctx)
	}()
}

// stop ends the role: no step starts after it, the running ones see their
// context cancelled, and it returns once they have returned.
func (rr *roleRun) stop() {
	rr.mu.Lock()
	rr.stopped = true
	t := rr.upkeep
	rr.mu.Unlock()
	rr.cancel()
	if t != nil {
		t.Stop()
	}
	rr.steps.Wait()
}

// kick makes the leader's upkeep run now (or first thing once armed).
func (rr *roleRun) kick() { rr.soon(0) }

// soon brings the leader's upkeep in to run within d, unless it is due
// sooner (or runs now: it then runs once more when done, as for a kick).
// It is a kick for what does not need the upkeep at once but must not wait
// for a quiet one: a parked fetch ending (park).
func (rr *roleRun) soon(d time.Duration) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	switch {
	case rr.stopped:
	case rr.upkeep == nil:
		rr.kicked = true
	case rr.busy:
		rr.again = true
	case time.Until(rr.upkeepDue) > d:
		rr.rearm(d)
	}
}

// rearm makes the upkeep run after delay, on a new timer: the old one is
// stopped, not reset. Moving a pending timer earlier makes the runtime scan
// every timer of its P at the next expiry, and a node's leaders kick their
// upkeeps often; a simulation of 1,000 nodes in one process (130,000
// timers) spent 78 % of its CPU in those scans. A stopped timer is only
// swept, in bulk. The caller holds mu.
func (rr *roleRun) rearm(delay time.Duration) {
	rr.upkeep.Stop()
	run := rr.upkeepRun
	rr.upkeepDue = time.Now().Add(delay)
	rr.upkeep = time.AfterFunc(delay, func() { rr.runUpkeep(run) })
}

// schedule arms the upkeep to run run after delay (at once when kicked
// before it was first armed).
func (rr *roleRun) schedule(delay time.Duration, run func(ctx context.Context)) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.stopped {
		return
	}
	if rr.upkeep == nil {
		if rr.kicked {
			delay = 0
		}
		rr.upkeepRun = run
		rr.upkeepDue = time.Now().Add(delay)
		rr.upkeep = time.AfterFunc(delay, func() { rr.runUpkeep(run) })
		return
	}
	rr.upkeepRun = run
	rr.rearm(delay)
}

// runUpkeep runs the upkeep in the timer's goroutine, one at a time: a run
// due while another runs (kicked) makes that one run again when done.
func (rr *roleRun) runUpkeep(run func(ctx context.Context)) {
	if !rr.enter() {
		return
	}
	defer rr.exit()
	rr.mu.Lock()
	if rr.busy {
		rr.again = true
		rr.mu.Unlock()
		return
	}
	rr.busy = true
	rr.mu.Unlock()
	for {
		run(rr.ctx)
		rr.mu.Lock()
		if !rr.again || rr.stopped {
			rr.busy = false
			rr.mu.Unlock()
			return
		}
		rr.again = false
		rr.mu.Unlock()
	}
}
