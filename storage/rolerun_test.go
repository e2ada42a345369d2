package storage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stop waits for a running step, cancels its context, and no step starts
// after it.
func TestRoleRunStopWaitsForStepsAndRefusesNewOnes(t *testing.T) {
	rr := newRoleRun(roleFollower)
	started, ended := make(chan struct{}), make(chan struct{})
	rr.goStep(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(ended)
	})
	<-started
	rr.stop()
	select {
	case <-ended:
	default:
		t.Fatal("stop returned before the running step ended")
	}
	var ran atomic.Bool
	rr.goStep(func(context.Context) { ran.Store(true) })
	rr.schedule(0, func(context.Context) { ran.Store(true) })
	rr.kick()
	rr.stop() // a second stop is harmless
	require.False(t, ran.Load(), "a step started after stop")
}

// A kick before the upkeep is first armed makes its first run immediate; a
// kick while it runs makes it run once more right after, never two at once.
func TestRoleRunUpkeepKicks(t *testing.T) {
	rr := newRoleRun(roleLeader)
	defer rr.stop()
	rr.kick()
	var runs, running, overlap atomic.Int32
	release := make(chan struct{})
	var upkeep func(ctx context.Context)
	upkeep = func(ctx context.Context) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		if runs.Add(1) == 1 {
			<-release // the first run is held until the test kicked it
		}
		running.Add(-1)
		rr.schedule(time.Hour, upkeep)
	}
	rr.schedule(time.Hour, upkeep) // kicked before: runs now, not in an hour
	require.Eventually(t, func() bool { return running.Load() == 1 }, 10*time.Second, time.Millisecond)
	rr.kick()
	// The kick's timer run found the first one busy; wait until it knows.
	require.Eventually(t, func() bool {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		return rr.again
	}, 10*time.Second, time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return runs.Load() == 2 && running.Load() == 0 }, 10*time.Second, time.Millisecond)
	require.Zero(t, overlap.Load(), "two upkeeps ran at once")
	rr.kick() // armed and idle: runs again at once
	require.Eventually(t, func() bool { return runs.Load() == 3 }, 10*time.Second, time.Millisecond)
}

// A leader's parked fetch ending brings its upkeep in to just past the lag
// bound, not to now nor to a quarter of it: the fetch counts as one just
// made, so nothing is due before the window passed, and the polls ending
// meanwhile (a follower re-sends its poll whenever a shard joins its
// session: each new database's, while a cluster is placed) share that one
// run. At a quarter of the bound, every re-send cost an upkeep of each shard
// of the poll.
func TestParkedFetchEndingBringsTheUpkeepInNotNow(t *testing.T) {
	const lag = time.Hour
	r := &replica{h: &Host{cfg: HostConfig{LagBound: lag}}, want: desired{role: roleLeader, term: 1}, ls: newLeaderState(0)}
	rr := newRoleRun(roleLeader)
	defer rr.stop()
	r.run = rr
	var runs atomic.Int32
	rr.schedule(quietUpkeep*lag, func(context.Context) { runs.Add(1) })
	for range 5 { // five re-sends of the follower's poll
		r.park("F", 1)
		r.park("F", -1)
	}
	require.Never(t, func() bool { return runs.Load() > 0 }, 300*time.Millisecond, 10*time.Millisecond, "the upkeep ran at once")
	rr.mu.Lock()
	due := time.Until(rr.upkeepDue)
	rr.mu.Unlock()
	require.Greater(t, due, lag, "the upkeep comes once the window has passed")
	require.LessOrEqual(t, due, lag+lag/8, "and just then, not at the quiet pace")
	rr.soon(time.Millisecond)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond)
}
